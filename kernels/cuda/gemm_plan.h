// One cuBLASLt GEMM problem made ready to run: its matmul descriptor, matrix layouts and the
// algorithms the heuristic offers (best first, up to kGemmAlgorithms: gemm.cu tries the next when
// cublasLtMatmul refuses one, kernels/cuda/gemm_fallback.h), built once per key (shape, operand
// type, compute type, epilogue, pointer alignments) and cached, since building descriptors and
// querying the heuristic costs far more than launching a small GEMM. Host code against
// cublasLt.h; used by kernels/cuda/gemm.cu. Untested on a GPU so far (this was written on a
// machine without one).
#pragma once
#include <cublasLt.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/cublas_lib.h"
#include "kernels/cuda/gemm_fallback.h"
#include "kernels/cuda/gemm_mapping.h"

namespace megatrain::cuda {

void check_cublas(cublasStatus_t status, const char* what);

// What cuBLASLt does after the product (kernels/cuda/gemm_mapping.h says along which dimension).
enum class GemmEpilogue : uint8_t {
  none,
  bias,           // D += bias (m entries)
  gelu_aux,       // aux = D; D = gelu(D)
  gelu_aux_bias,  // aux = D + bias; D = gelu(aux)
  dgelu,          // D = D ⊙ gelu'(aux)
  bgradb,         // bias pointer = Σ_k op(B) (n entries)
};

struct GemmKey {
  ColumnMajorGemm g;
  cudaDataType_t ab_type;  // CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F; C and D are always CUDA_R_32F
  cublasComputeType_t compute;
  GemmEpilogue epilogue;
  int a_align, b_align, d_align, bias_align, aux_align;  // bytes the pointers are aligned to (≤ 256)

  auto tie() const {
    return std::make_tuple(g.a, g.b, g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.beta != 0.0f, ab_type,
                           compute, epilogue, a_align, b_align, d_align, bias_align, aux_align);
  }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

// The largest power of two (up to 256) that divides the address; 256 for nullptr.
int pointer_alignment(const void* p);

// The problem in words for errors and the log: shape, leading dimensions, types, epilogue, alignments.
std::string gemm_describe(const GemmKey& key);
// Logs (a warning) that the problem `key` ran as `ran` after the failed attempts `failures` names.
void gemm_log_fallback(const GemmKey& key, GemmAttempt ran, const std::string& failures);

// A plan that cuBLASLt has no algorithm for (an epilogue it does not offer for these types, say)
// has no algos and why_not naming the problem; the caller falls back (gemm_fallback.h).
class GemmPlan {
 public:
  GemmPlan(cublasLtHandle_t handle, const GemmKey& key, size_t workspace_bytes, const void* bias, const void* aux);

  // The bias (or bias gradient) and aux pointers of this call; aligned as the key says.
  void set_epilogue_pointers(const void* bias, const void* aux);

  // Owned descriptors, destroyed with the plan (also when the constructor throws half-way).
  using Desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, cublasStatus_t (*)(cublasLtMatmulDesc_t)>;
  using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, cublasStatus_t (*)(cublasLtMatrixLayout_t)>;
  Desc desc{nullptr, cublas_lib().LtMatmulDescDestroy};
  Layout a{nullptr, cublas_lib().LtMatrixLayoutDestroy}, b{nullptr, cublas_lib().LtMatrixLayoutDestroy},
      d{nullptr, cublas_lib().LtMatrixLayoutDestroy};  // C shares D's layout
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's offers, best first
  std::string why_not;
};

class GemmPlanCache {
 public:
  GemmPlan& get(cublasLtHandle_t handle, const GemmKey& key, size_t workspace_bytes, const void* bias,
                const void* aux);
  size_t size() const { return plans_.size(); }

 private:
  std::map<GemmKey, std::unique_ptr<GemmPlan>> plans_;
};

}  // namespace megatrain::cuda
