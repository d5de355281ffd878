// Stream: where an op runs. On CPU ops run synchronously on the calling thread (OpenMP inside);
// the CUDA backend gives a Stream its cudaStream_t. Every op takes the stream first.
#pragma once
#include "kernels/tensor.h"

namespace megatrain {

struct Stream {
  Device device = Device::cpu;
  void* handle = nullptr;  // cudaStream_t on CUDA, unused on CPU
  static Stream cpu() { return Stream{}; }
};

}  // namespace megatrain
