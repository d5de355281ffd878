// Stream: where an op runs. On CPU ops run synchronously on the calling thread (OpenMP inside);
// the CUDA backend gives a Stream its cudaStream_t. Every op takes the stream first.
#pragma once
#include "kernels/tensor.h"

namespace megatrain {

// What the linear layers' GEMMs (matmul_forward/backward) multiply: float32 values, or their
// bfloat16 or fp16 roundings (kernels/half.h) — products and sums in float32 either way, as
// mixed-precision training does (a product of two 16-bit values is exact in float32).
enum class Precision : uint8_t { fp32, bf16, fp16 };
constexpr DType dtype_of(Precision p) {
  return p == Precision::fp32 ? DType::f32 : p == Precision::bf16 ? DType::bf16 : DType::f16;
}
constexpr const char* precision_name(Precision p) {
  return p == Precision::fp32 ? "fp32" : p == Precision::bf16 ? "bf16" : "fp16";
}

struct Stream {
  Device device = Device::cpu;
  void* handle = nullptr;  // cudaStream_t on CUDA, unused on CPU
  Precision matmul = Precision::fp32;
  static Stream cpu(Precision matmul = Precision::fp32) { return Stream{Device::cpu, nullptr, matmul}; }
};

}  // namespace megatrain
