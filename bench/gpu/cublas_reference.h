// The reference the linear layers' GEMMs are timed against (bench/gpu/kernel_times.cpp): the same
// product by plain cuBLAS (cublasGemmEx, float32 accumulation and output) on the same operands as
// the op it is compared with — the op's own random tensors, or for 16-bit GEMM inputs their
// roundings, made once by the caller (the op rounds its operands on every call, and its time
// includes that). Constant or zero data would flatter cuBLAS: Hopper runs it faster.
#pragma once
#include <functional>
#include <optional>

#include "kernels/tensor.h"

namespace megatrain {

// The three products of a linear layer out (N × OC) = inp (N × C) · weightᵀ (row-major):
// forward, input gradient dout · weight, weight gradient doutᵀ · inp (accumulated).
enum class CublasProduct { forward, input_grad, weight_grad };

// Row-major operands on the stream's device: inp (N, C), weight (OC, C) and dout (N, OC), f32 on a
// float32 stream, else the stream's 16-bit type; out (f32) is the product's output: out (N, OC),
// dinp (N, C) or dweight (OC, C).
struct CublasOperands {
  Tensor inp, weight, dout, out;
};

// One call of product p, for the caller to time; nullopt when `s` is not a CUDA stream or the
// build has no CUDA backend. Its cuBLAS handle lives as long as the returned function.
std::optional<std::function<void()>> cublas_gemm(const Stream& s, CublasProduct p, const CublasOperands& x);

}  // namespace megatrain
