// The reference the linear layers' GEMMs are timed against (bench/gpu/kernel_times.cpp): the same
// product by plain cuBLAS (cublasGemmEx), with the stream's GEMM input type (float32, or bfloat16
// inputs) and float32 accumulation and output, on buffers of its own.
#pragma once
#include <cstdint>
#include <optional>

#include "kernels/device.h"

namespace megatrain {

// The three products of a linear layer out (N × OC) = inp (N × C) · weightᵀ (row-major):
// forward, input gradient dout · weight, weight gradient doutᵀ · inp (accumulated).
enum class CublasProduct { forward, input_grad, weight_grad };

// Milliseconds per call over `iters` calls after 3 warm-up calls; nullopt when `s` is not a CUDA
// stream or the build has no CUDA backend.
std::optional<double> cublas_gemm_ms(const Stream& s, CublasProduct p, int64_t N, int C, int OC, int iters);

}  // namespace megatrain
