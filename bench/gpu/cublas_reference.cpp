// cuBLAS's GEMMs on the operands of kernel_times' linear layers (bench/gpu/cublas_reference.h).
#include "bench/gpu/cublas_reference.h"

#ifdef MEGATRAIN_HAS_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#include <fmt/format.h>

#include <memory>

#include "kernels/check.h"
#include "kernels/device.h"

namespace megatrain {

#ifdef MEGATRAIN_HAS_CUDA
namespace {

void check(cublasStatus_t e, const char* what) {
  MT_CHECK(e == CUBLAS_STATUS_SUCCESS, "cuBLAS reference: {}: {}", what, cublasGetStatusString(e));
}

cudaDataType_t cuda_type(DType t) {
  MT_CHECK(t == DType::f32 || t == DType::bf16 || t == DType::f16, "cuBLAS reference: operands of type {}",
           dtype_name(t));
  return t == DType::f32 ? CUDA_R_32F : t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

}  // namespace

std::optional<std::function<void()>> cublas_gemm(const Stream& s, CublasProduct p, const CublasOperands& x) {
  if (s.device != Device::cuda) return std::nullopt;
  const DType want = s.matmul == Precision::fp32 ? DType::f32 : s.matmul == Precision::bf16 ? DType::bf16 : DType::f16;
  MT_CHECK(x.inp.dtype == want && x.weight.dtype == want && x.dout.dtype == want && x.out.dtype == DType::f32,
           "cuBLAS reference: {} operands on a {} stream (make them with the stream's GEMM input type)",
           dtype_name(x.inp.dtype), precision_name(s.matmul));
  const int N = static_cast<int>(x.inp.shape[0]), C = static_cast<int>(x.inp.shape[1]);
  const int OC = static_cast<int>(x.weight.shape[0]);
  // Column-major views of the row-major operands (the output's transpose is computed):
  //   forward      outᵀ (OC × N)  = W (C × OC)ᵀ · inpᵀ (C × N)
  //   input grad   dinpᵀ (C × N)  = W (C × OC) · doutᵀ (OC × N)
  //   weight grad  dWᵀ (C × OC)  += inpᵀ (C × N) · dout (OC × N)ᵀ
  struct Gemm {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    const void *a, *b;
    float beta;
  };
  const Gemm g = p == CublasProduct::forward
                     ? Gemm{CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, C, C, OC, x.weight.data, x.inp.data, 0.0f}
                 : p == CublasProduct::input_grad
                     ? Gemm{CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, C, OC, C, x.weight.data, x.dout.data, 0.0f}
                     : Gemm{CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, C, OC, C, x.inp.data, x.dout.data, 1.0f};
  cublasHandle_t raw = nullptr;
  check(cublasCreate(&raw), "cublasCreate");
  const std::shared_ptr<cublasContext> handle(raw, cublasDestroy);
  check(cublasSetStream(raw, static_cast<cudaStream_t>(s.handle)), "cublasSetStream");
  const cudaDataType_t in = cuda_type(want);
  float* out = x.out.f32();
  return [handle, g, in, out] {
    const float alpha = 1.0f;
    check(cublasGemmEx(handle.get(), g.ta, g.tb, g.m, g.n, g.k, &alpha, g.a, in, g.lda, g.b, in, g.ldb, &g.beta, out,
                       CUDA_R_32F, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  };
}

#else

std::optional<std::function<void()>> cublas_gemm(const Stream&, CublasProduct, const CublasOperands&) {
  return std::nullopt;
}

#endif

}  // namespace megatrain
