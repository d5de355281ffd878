// The device allocator under CachingAllocator: cudaMalloc / cudaFree on the current device.
// Out of memory is reported as nullptr (the allocator then gives its cache back and retries); any
// other failure throws, naming the call.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "kernels/cuda/caching_allocator.h"

namespace megatrain::cuda {

RawAllocator cuda_raw_allocator() {
  RawAllocator raw;
  raw.malloc = [](size_t bytes) -> void* {
    void* ptr = nullptr;
    const cudaError_t e = cudaMalloc(&ptr, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: out of memory is not a sticky error, the retry may succeed
      return nullptr;
    }
    if (e != cudaSuccess)
      throw Error(fmt::format("CUDA: cudaMalloc of {} bytes: {}", bytes, cudaGetErrorString(e)));
    return ptr;
  };
  raw.free = [](void* ptr) {
    const cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess)
      throw Error(fmt::format("CUDA: cudaFree: {} (a kernel still using this memory may have failed)",
                              cudaGetErrorString(e)));
  };
  return raw;
}

}  // namespace megatrain::cuda
