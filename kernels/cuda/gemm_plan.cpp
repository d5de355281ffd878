// cuBLASLt descriptors and heuristic results, cached per problem (kernels/cuda/gemm_plan.h).
#include "kernels/cuda/gemm_plan.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdint>

#include "kernels/check.h"

namespace megatrain::cuda {
namespace {

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::bgradb: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool has_aux(GemmEpilogue e) {
  return e == GemmEpilogue::gelu_aux || e == GemmEpilogue::gelu_aux_bias || e == GemmEpilogue::dgelu;
}

template <class T>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value, const char* what) {
  check_cublas(cublas_lib().LtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), what);
}

const char* type_name(cudaDataType_t t) {
  return t == CUDA_R_32F ? "float32" : t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "fp16" : "another type";
}

const char* compute_name(cublasComputeType_t c) {
  return c == CUBLAS_COMPUTE_32F ? "float32" : c == CUBLAS_COMPUTE_32F_FAST_TF32 ? "TF32" : "another compute type";
}

// The epilogue, and the kernel that does its work when it is not fused (gemm.cu).
const char* epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none: return "no epilogue";
    case GemmEpilogue::bias: return "epilogue bias (else a broadcast-add kernel)";
    case GemmEpilogue::gelu_aux: return "epilogue GELU with aux (else the GELU kernel)";
    case GemmEpilogue::gelu_aux_bias: return "epilogue bias + GELU with aux (else a broadcast-add and the GELU kernel)";
    case GemmEpilogue::dgelu: return "epilogue GELU gradient (else the GELU backward kernel)";
    case GemmEpilogue::bgradb: return "epilogue bias gradient (else a column sum)";
  }
  return "";
}

}  // namespace

std::string gemm_describe(const GemmKey& k) {
  return fmt::format("m={} n={} k={} lda={} ldb={} ldd={} trans_a={} trans_b={} beta={}, {} A and B, float32 C and "
                     "D, {} compute, {}, alignments a/b/d/bias/aux {}/{}/{}/{}/{} bytes",
                     k.g.m, k.g.n, k.g.k, k.g.lda, k.g.ldb, k.g.ldd, k.g.trans_a, k.g.trans_b, k.g.beta,
                     type_name(k.ab_type), compute_name(k.compute), epilogue_name(k.epilogue), k.a_align, k.b_align,
                     k.d_align, k.bias_align, k.aux_align);
}

void gemm_log_fallback(const GemmKey& key, GemmAttempt ran, const std::string& failures) {
  spdlog::warn("WARNING: GEMM fallback: the GEMM {} runs as {}{} after: {}", gemm_describe(key), gemm_attempt_name(ran),
               gemm_epilogue_separate(ran.route) && key.epilogue != GemmEpilogue::none
                   ? ", its epilogue as a kernel of its own"
                   : "",
               failures);
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("cuBLASLt: {}: {}", what, cublas_lib().LtGetStatusString(status)));
}

int pointer_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int align = 1;
  while (align < 256 && a % static_cast<uintptr_t>(2 * align) == 0) align *= 2;
  return align;
}

GemmPlan::GemmPlan(cublasLtHandle_t handle, const GemmKey& key, size_t workspace_bytes, const void* bias,
                   const void* aux) {
  const ColumnMajorGemm& g = key.g;
  cublasLtMatmulDesc_t raw_desc = nullptr;
  check_cublas(cublas_lib().LtMatmulDescCreate(&raw_desc, key.compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  desc.reset(raw_desc);
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, ta, "set TRANSA");
  set_attr(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, tb, "set TRANSB");
  set_attr(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(key.epilogue), "set EPILOGUE");
  // Bias, bias gradient and aux take D's type (float32) by default, which is what is wanted here.
  if (has_aux(key.epilogue)) set_attr(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ldd, "set EPILOGUE_AUX_LD");
  set_epilogue_pointers(bias, aux);

  // Stored shapes: A is m × k (k × m when transposed), B is k × n (n × k); C and D are m × n.
  const auto layout = [](Layout& out, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, const char* what) {
    cublasLtMatrixLayout_t raw = nullptr;
    check_cublas(
        cublas_lib().LtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
        what);
    out.reset(raw);
  };
  layout(a, key.ab_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, "cublasLtMatrixLayoutCreate (A)");
  layout(b, key.ab_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, "cublasLtMatrixLayoutCreate (B)");
  layout(d, CUDA_R_32F, g.m, g.n, g.ldd, "cublasLtMatrixLayoutCreate (D)");

  cublasLtMatmulPreference_t raw_pref = nullptr;
  check_cublas(cublas_lib().LtMatmulPreferenceCreate(&raw_pref), "cublasLtMatmulPreferenceCreate");
  const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, cublasStatus_t (*)(cublasLtMatmulPreference_t)> pref(
      raw_pref, cublas_lib().LtMatmulPreferenceDestroy);
  const auto pref_attr = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value, const char* what) {
    check_cublas(cublas_lib().LtMatmulPreferenceSetAttribute(raw_pref, attr, &value, sizeof(value)), what);
  };
  pref_attr(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes), "workspace size");
  pref_attr(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key.a_align), "A alignment");
  pref_attr(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key.b_align), "B alignment");
  pref_attr(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(key.d_align), "C alignment");
  pref_attr(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key.d_align), "D alignment");
  cublasLtMatmulHeuristicResult_t results[kGemmAlgorithms] = {};
  int found = 0;
  const cublasStatus_t st = cublas_lib().LtMatmulAlgoGetHeuristic(handle, raw_desc, a.get(), b.get(), d.get(), d.get(),
                                                           raw_pref, kGemmAlgorithms, results, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    why_not = fmt::format("cuBLASLt's heuristic has no algorithm ({})", cublas_lib().LtGetStatusString(st));
    return;
  }
  for (int i = 0; i < found && i < kGemmAlgorithms; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
  if (algos.empty()) why_not = fmt::format("cuBLASLt's heuristic offered {} algorithms, none usable", found);
}

void GemmPlan::set_epilogue_pointers(const void* bias, const void* aux) {
  if (bias) set_attr(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "set BIAS_POINTER");
  if (aux) set_attr(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, "set EPILOGUE_AUX_POINTER");
}

GemmPlan& GemmPlanCache::get(cublasLtHandle_t handle, const GemmKey& key, size_t workspace_bytes, const void* bias,
                             const void* aux) {
  auto it = plans_.find(key);
  if (it == plans_.end())
    it = plans_.emplace(key, std::make_unique<GemmPlan>(handle, key, workspace_bytes, bias, aux)).first;
  else
    it->second->set_epilogue_pointers(bias, aux);
  return *it->second;
}

}  // namespace megatrain::cuda
