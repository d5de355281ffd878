// Stream: where an op runs. On CPU ops run synchronously on the calling thread (OpenMP inside);
// the CUDA backend gives a Stream its cudaStream_t. Every op takes the stream first.
#pragma once
#include "kernels/tensor.h"

namespace megatrain {

// What the linear layers' GEMMs (matmul_forward/backward) multiply: float32 values, or their
// bfloat16 roundings (kernels/bf16.h) — products and sums in float32 either way, as mixed-precision
// training does.
enum class MatmulPrecision : uint8_t { fp32, bf16 };

struct Stream {
  Device device = Device::cpu;
  void* handle = nullptr;  // cudaStream_t on CUDA, unused on CPU
  MatmulPrecision matmul = MatmulPrecision::fp32;
  static Stream cpu(MatmulPrecision matmul = MatmulPrecision::fp32) { return Stream{Device::cpu, nullptr, matmul}; }
};

}  // namespace megatrain
