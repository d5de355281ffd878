#include "bench/gpu/cublas_reference.h"

#ifdef MEGATRAIN_HAS_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#include <fmt/format.h>

#include "kernels/check.h"

namespace megatrain {

#ifdef MEGATRAIN_HAS_CUDA
namespace {

void check(cudaError_t e, const char* what) {
  MT_CHECK(e == cudaSuccess, "cuBLAS reference: {}: {}", what, cudaGetErrorString(e));
}
void check(cublasStatus_t e, const char* what) {
  MT_CHECK(e == CUBLAS_STATUS_SUCCESS, "cuBLAS reference: {}: status {}", what, static_cast<int>(e));
}

}  // namespace

std::optional<double> cublas_gemm_ms(const Stream& s, CublasProduct p, int64_t N, int C, int OC, int iters) {
  if (s.device != Device::cuda) return std::nullopt;
  const bool bf16 = s.matmul != Precision::fp32;
  const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const size_t in_size = bf16 ? 2 : 4;
  // Column-major views of the row-major operands (the output's transpose is computed):
  //   forward      outᵀ (OC × N)  = W (C × OC)ᵀ · inpᵀ (C × N)
  //   input grad   dinpᵀ (C × N)  = W (C × OC) · doutᵀ (OC × N)
  //   weight grad  dWᵀ (C × OC)  += inpᵀ (C × N) · dout (OC × N)ᵀ
  struct Gemm {
    cublasOperation_t ta, tb;
    int64_t m, n, k, lda, ldb, ldc, a_elems, b_elems, c_elems;
    float beta;
  };
  const int64_t c = C, oc = OC;
  const Gemm g = p == CublasProduct::forward
                     ? Gemm{CUBLAS_OP_T, CUBLAS_OP_N, oc, N, c, c, c, oc, oc * c, N * c, N * oc, 0.0f}
                 : p == CublasProduct::input_grad
                     ? Gemm{CUBLAS_OP_N, CUBLAS_OP_N, c, N, oc, c, oc, c, oc * c, N * oc, N * c, 0.0f}
                     : Gemm{CUBLAS_OP_N, CUBLAS_OP_T, c, oc, N, c, oc, c, N * c, N * oc, oc * c, 1.0f};
  void *a = nullptr, *b = nullptr, *out = nullptr;
  check(cudaMalloc(&a, static_cast<size_t>(g.a_elems) * in_size), "cudaMalloc");
  check(cudaMalloc(&b, static_cast<size_t>(g.b_elems) * in_size), "cudaMalloc");
  check(cudaMalloc(&out, static_cast<size_t>(g.c_elems) * 4), "cudaMalloc");
  const auto stream = static_cast<cudaStream_t>(s.handle);
  // 0x3c bytes: about 0.0115 as float32 and as bfloat16, finite products and sums.
  check(cudaMemsetAsync(a, 0x3c, static_cast<size_t>(g.a_elems) * in_size, stream), "cudaMemset");
  check(cudaMemsetAsync(b, 0x3c, static_cast<size_t>(g.b_elems) * in_size, stream), "cudaMemset");
  check(cudaMemsetAsync(out, 0, static_cast<size_t>(g.c_elems) * 4, stream), "cudaMemset");
  cublasHandle_t handle = nullptr;
  check(cublasCreate(&handle), "cublasCreate");
  check(cublasSetStream(handle, stream), "cublasSetStream");
  const float alpha = 1.0f;
  const auto call = [&] {
    check(cublasGemmEx(handle, g.ta, g.tb, static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), &alpha,
                       a, in, static_cast<int>(g.lda), b, in, static_cast<int>(g.ldb), &g.beta, out, CUDA_R_32F,
                       static_cast<int>(g.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  };
  for (int i = 0; i < 3; ++i) call();
  cudaEvent_t start = nullptr, end = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  check(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) call();
  check(cudaEventRecord(end, stream), "cudaEventRecord");
  check(cudaEventSynchronize(end), "cudaEventSynchronize");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(out);
  return static_cast<double>(ms) / iters;
}

#else

std::optional<double> cublas_gemm_ms(const Stream&, CublasProduct, int64_t, int, int, int) { return std::nullopt; }

#endif

}  // namespace megatrain
