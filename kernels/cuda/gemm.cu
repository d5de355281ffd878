// The linear layer's GEMMs (kernels/ops.h matmul semantics) through cuBLASLt on device pointers:
// the row-major problems mapped to column-major ones (gemm_mapping.h), bias and GELU fused as
// cuBLASLt epilogues, plans cached per problem (gemm_plan.h), workspace and scratch from the
// caching allocator. A problem cuBLASLt cannot run as asked falls back, logged once: another
// offered algorithm, the GEMM without its epilogue and the epilogue as its own kernel, or
// cublasGemmEx (gemm_fallback.h). bf16/fp16 modes round the float32 operands to 16 bits first (a
// kernel here) and multiply those with float32 sums and outputs.
// Compiled here without a GPU at hand: not yet run on one.
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/gemm_plan.h"

#include <cublas_v2.h>

#include <map>
#include <string>
#include <type_traits>

namespace megatrain::MT_CUDA_NS {
namespace {

// A device buffer that only grows, from the caching allocator on the context's stream (a smaller
// buffer freed there is reused by the same stream's later work, so no synchronisation is needed).
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  void* reserve(CachingAllocator& memory, cudaStream_t stream, size_t need) {
    if (need > bytes) {
      memory.deallocate(ptr);
      ptr = nullptr;
      bytes = 0;
      ptr = memory.allocate(need, stream);
      bytes = need;
    }
    return ptr;
  }
};

// float32 → bf16 / fp16, round to nearest even (as kernels/cpu/convert.cpp). The GEMM's own copy of
// the operand rounding, so it does not depend on the general conversion op (convert, elementwise).
template <class H>
__global__ void round_operand_kernel(H* out, const float* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (std::is_same_v<H, __nv_bfloat16>)
      out[i] = __float2bfloat16_rn(in[i]);
    else
      out[i] = __float2half_rn(in[i]);
  }
}

// Blocks of 256 threads for a grid-stride loop over n elements, at most 4096 of them.
unsigned grid_for(int64_t n) {
  const unsigned blocks = ceil_div(n, 256);
  return blocks < 4096 ? blocks : 4096;
}

// Term of the bias-gradient column sum: dout (N, OC) element (i, c).
struct DoutTerm {
  const float* dout;
  int OC;
  __device__ float operator()(int64_t i, int c) const { return dout[i * OC + c]; }
};

cudaDataType_t operand_type(Precision p) {
  return p == Precision::fp32 ? CUDA_R_32F : p == Precision::bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

cublasComputeType_t compute_type(GemmMode mode) {
  return mode.precision == Precision::fp32 && mode.fp32_math == Fp32Math::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                : CUBLAS_COMPUTE_32F;
}

}  // namespace

struct GemmContext::Impl {
  cudaStream_t stream;
  CachingAllocator& memory;
  std::unique_ptr<cublasLtContext, cublasStatus_t (*)(cublasLtHandle_t)> handle{nullptr, cublas_lib().LtDestroy};
  void* workspace = nullptr;
  size_t workspace_bytes;
  Scratch operand[3];  // 16-bit copies, by GemmOperand
  Scratch bias_grad;   // BGRADB's output, or the column sum's partials
  GemmPlanCache plans;
  std::map<GemmKey, GemmAttempt> routes;  // the attempt that ran each problem seen
  std::unique_ptr<cublasContext, cublasStatus_t (*)(cublasHandle_t)> blas{nullptr, cublas_lib().Destroy};  // gemm_ex's

  Impl(cudaStream_t s, CachingAllocator& m, size_t ws) : stream(s), memory(m), workspace_bytes(ws) {
    cublasLtHandle_t h = nullptr;
    check_cublas(cublas_lib().LtCreate(&h), "cublasLtCreate (is a CUDA device visible?)");
    handle.reset(h);
    workspace = memory.allocate(workspace_bytes, stream);
  }
  ~Impl() {
    for (Scratch& s : operand) memory.deallocate(s.ptr);
    memory.deallocate(bias_grad.ptr);
    memory.deallocate(workspace);
  }

  // The operand as the GEMM reads it: the float32 buffer itself, or its 16-bit rounding.
  const void* operand_for(GemmOperand which, const float* src, int64_t count, Precision p) {
    if (p == Precision::fp32) return src;
    void* dst = operand[static_cast<int>(which)].reserve(memory, stream, static_cast<size_t>(count) * 2);
    const dim3 grid(grid_for(count));
    if (p == Precision::bf16)
      launch(round_operand_kernel<__nv_bfloat16>, grid, dim3(256), 0, stream, static_cast<__nv_bfloat16*>(dst), src,
             count);
    else
      launch(round_operand_kernel<__half>, grid, dim3(256), 0, stream, static_cast<__half*>(dst), src, count);
    return dst;
  }

  // D = op(A)·op(B) (+ beta·D) for `pass`, with operands[GemmOperand] already in the GEMM's type,
  // the epilogue fused where cuBLASLt offers it. Returns false when the GEMM ran without the
  // epilogue (gemm_fallback.h), which the caller then runs as its own kernel. The attempts of a
  // problem's first call are walked in order, the one that ran is kept for its later calls, and a
  // fallback is logged once (the first call that needed it); throws when nothing runs.
  bool run(GemmPass pass, int64_t N, int C, int OC, const void* const* operands, float* D, GemmEpilogue epilogue,
           const void* bias, const void* aux, GemmMode mode) {
    const ColumnMajorGemm g = gemm_mapping(pass, N, C, OC);
    const void* A = operands[static_cast<int>(g.a)];
    const void* B = operands[static_cast<int>(g.b)];
    const GemmKey key{g,
                      operand_type(mode.precision),
                      compute_type(mode),
                      epilogue,
                      pointer_alignment(A),
                      pointer_alignment(B),
                      pointer_alignment(D),
                      pointer_alignment(bias),
                      pointer_alignment(aux)};
    const auto known = routes.find(key);
    GemmAttempt at = known != routes.end() ? known->second : gemm_first_attempt(epilogue != GemmEpilogue::none);
    std::string failures;  // "attempt: why; …"
    while (at.route != GemmRoute::none) {
      int offered = 1;
      std::string why;
      if (attempt(at, key, A, B, D, bias, aux, offered, why)) break;
      failures += fmt::format("{}{}: {}", failures.empty() ? "" : "; ", gemm_attempt_name(at), why);
      at = gemm_next_attempt(at, offered);
    }
    if (at.route == GemmRoute::none)
      throw Error(fmt::format("no way to run the GEMM {}: {}", gemm_describe(key), failures));
    if (!failures.empty()) gemm_log_fallback(key, at, failures);
    if (known == routes.end() || !failures.empty()) routes[key] = at;
    return at.route == GemmRoute::fused;
  }

  // One attempt: true when it ran; otherwise why not, and `offered`, the algorithms the route's
  // heuristic offered (for gemm_next_attempt).
  bool attempt(GemmAttempt at, const GemmKey& key, const void* A, const void* B, float* D, const void* bias,
               const void* aux, int& offered, std::string& why) {
    const ColumnMajorGemm& g = key.g;
    const float alpha = 1.0f, beta = g.beta;
    if (at.route == GemmRoute::gemm_ex) {
      cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
      if (!blas) {  // made on the first fallback to it, on this stream, sharing the workspace
        cublasHandle_t h = nullptr;
        st = cublas_lib().Create(&h);
        decltype(blas) made(h, cublas_lib().Destroy);
        if (st == CUBLAS_STATUS_SUCCESS) st = cublas_lib().SetStream(h, stream);
        if (st == CUBLAS_STATUS_SUCCESS) st = cublas_lib().SetWorkspace(h, workspace, workspace_bytes);
        if (st == CUBLAS_STATUS_SUCCESS) blas = std::move(made);
      }
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublas_lib().GemmEx(blas.get(), g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.m), static_cast<int>(g.n),
                                 static_cast<int>(g.k), &alpha, A, key.ab_type, static_cast<int>(g.lda), B, key.ab_type,
                                 static_cast<int>(g.ldb), &beta, D, CUDA_R_32F, static_cast<int>(g.ldd), key.compute,
                                 CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) why = cublas_lib().GetStatusString(st);
      return st == CUBLAS_STATUS_SUCCESS;
    }
    const bool fused = at.route == GemmRoute::fused;
    GemmKey plan_key = key;
    if (!fused) {  // the plain GEMM's plan, shared with the problems that have no epilogue
      plan_key.epilogue = GemmEpilogue::none;
      plan_key.bias_align = plan_key.aux_align = pointer_alignment(nullptr);
    }
    GemmPlan& plan = plans.get(handle.get(), plan_key, workspace_bytes, fused ? bias : nullptr, fused ? aux : nullptr);
    offered = static_cast<int>(plan.algos.size());
    if (plan.algos.empty()) {
      why = plan.why_not;
      return false;
    }
    const cublasStatus_t st =
        cublas_lib().LtMatmul(handle.get(), plan.desc.get(), &alpha, A, plan.a.get(), B, plan.b.get(), &beta, D,
                              plan.d.get(), D, plan.d.get(), &plan.algos[static_cast<size_t>(at.algorithm)], workspace,
                              workspace_bytes, stream);
    if (st != CUBLAS_STATUS_SUCCESS)
      why = fmt::format("cublasLtMatmul refused it ({})", cublas_lib().LtGetStatusString(st));
    return st == CUBLAS_STATUS_SUCCESS;
  }

  // The forward GEMM's epilogue as kernels of their own, on out (rows × cols, row-major) that the
  // GEMM wrote without it: out += bias per column; then with pre_gelu, pre_gelu = out and
  // out = gelu(pre_gelu).
  void forward_epilogue(float* out, float* pre_gelu, const float* bias, int64_t rows, int cols) {
    const int64_t n = rows * cols;
    if (bias) bias_add(stream, out, bias, rows, cols);
    if (pre_gelu) {
      copy(stream, pre_gelu, out, n);
      gelu_forward(stream, out, pre_gelu, n);
    }
  }
};

GemmContext::GemmContext(cudaStream_t stream, CachingAllocator& memory, size_t workspace_bytes)
    : impl_(std::make_unique<Impl>(stream, memory, workspace_bytes)) {}

GemmContext::~GemmContext() = default;

int64_t GemmContext::scratch_bytes() const {
  size_t total = impl_->workspace_bytes + impl_->bias_grad.bytes;
  for (const Scratch& s : impl_->operand) total += s.bytes;
  return static_cast<int64_t>(total);
}

void matmul_forward(cudaStream_t stream, GemmContext& ctx, float* out, float* pre_gelu, const float* inp,
                    const float* weight, const float* bias, int64_t N, int C, int OC, GemmMode mode) {
  GemmContext::Impl& c = ctx.impl();
  if (stream != c.stream)
    throw Error("matmul_forward on a stream other than its GemmContext's (make one context per stream)");
  if (pre_gelu && OC % 8 != 0)
    throw Error(fmt::format("matmul_forward with GELU: cuBLASLt needs the output width OC = {} divisible by 8", OC));
  if (N == 0) return;  // no rows: nothing to compute (and cuBLASLt takes no empty matrices)
  const void* operands[3] = {};
  operands[static_cast<int>(GemmOperand::inp)] = c.operand_for(GemmOperand::inp, inp, N * C, mode.precision);
  operands[static_cast<int>(GemmOperand::weight)] =
      c.operand_for(GemmOperand::weight, weight, int64_t{OC} * C, mode.precision);
  const GemmEpilogue epilogue = pre_gelu ? (bias ? GemmEpilogue::gelu_aux_bias : GemmEpilogue::gelu_aux)
                                         : (bias ? GemmEpilogue::bias : GemmEpilogue::none);
  if (!c.run(GemmPass::forward, N, C, OC, operands, out, epilogue, bias, pre_gelu, mode))
    c.forward_epilogue(out, pre_gelu, bias, N, OC);
}

void matmul_backward(cudaStream_t stream, GemmContext& ctx, float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight, const float* gelu_pre, int64_t N,
                     int C, int OC, GemmMode mode) {
  GemmContext::Impl& c = ctx.impl();
  if (stream != c.stream)
    throw Error("matmul_backward on a stream other than its GemmContext's (make one context per stream)");
  if (gelu_pre && dinp && C % 8 != 0)
    throw Error(fmt::format("matmul_backward through GELU: cuBLASLt needs the input width C = {} divisible by 8", C));
  if (N == 0) return;  // no rows: dinp is empty, and dweight and dbias gain nothing
  const void* operands[3] = {};
  if (dinp || dweight)
    operands[static_cast<int>(GemmOperand::dout)] =
        c.operand_for(GemmOperand::dout, dout, N * OC, mode.precision);
  if (dinp) {
    operands[static_cast<int>(GemmOperand::weight)] =
        c.operand_for(GemmOperand::weight, weight, int64_t{OC} * C, mode.precision);
    const GemmEpilogue epilogue = gelu_pre ? GemmEpilogue::dgelu : GemmEpilogue::none;
    if (!c.run(GemmPass::dinp, N, C, OC, operands, dinp, epilogue, nullptr, gelu_pre, mode) && gelu_pre)
      gelu_backward(stream, dinp, dinp, gelu_pre, N * C);  // dinp ⊙= gelu'(gelu_pre), in place
  }
  // BGRADB writes the bias gradient (it cannot accumulate), so it goes to scratch and is added to
  // dbias after. Only at fp32: in the 16-bit modes B is the rounded dout, while dbias sums the
  // float32 dout (as the CPU op does). Where it is not used, or the GEMM ran without it (run
  // returns false), a column sum computes dbias instead.
  bool fused_dbias = false;
  if (dweight) {
    operands[static_cast<int>(GemmOperand::inp)] = c.operand_for(GemmOperand::inp, inp, N * C, mode.precision);
    const bool bgradb = dbias && mode.precision == Precision::fp32;
    float* partial = bgradb ? static_cast<float*>(c.bias_grad.reserve(c.memory, stream, sizeof(float) * OC)) : nullptr;
    fused_dbias = c.run(GemmPass::dweight, N, C, OC, operands, dweight,
                        bgradb ? GemmEpilogue::bgradb : GemmEpilogue::none, partial, nullptr, mode);
    if (fused_dbias)  // dbias += partial: the column sum's last step, over one chunk
      launch(column_finish_kernel<>, dim3(ceil_div(OC, 256)), dim3(256), 0, stream, dbias, partial, 1, OC);
  }
  if (dbias && !fused_dbias) {
    float* partials = static_cast<float*>(
        c.bias_grad.reserve(c.memory, stream, sizeof(float) * column_sum_scratch_floats(N, OC)));
    column_sum_accumulate(stream, dbias, N, OC, DoutTerm{dout, OC}, partials);
  }
}

}  // namespace megatrain::MT_CUDA_NS
