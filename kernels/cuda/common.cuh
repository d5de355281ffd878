// What every kernels/cuda/*.cu file includes: the CUDA headers (or, in a test, the host SIMT
// emulation of tests/simt/simt.h, included before the .cu file), the launch helper, dynamic shared
// memory, and the warp and block reductions the kernels share.
#pragma once
#ifndef MEGATRAIN_SIMT
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/cuda/cuda.h"

// The block's dynamic shared memory as a T array named `name` (16-byte aligned).
#ifdef MEGATRAIN_SIMT
#define MT_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::simt::dynamic_shared())
#else
#define MT_DYNAMIC_SHARED(T, name)                          \
  extern __shared__ __align__(16) unsigned char mt_smem_[]; \
  T* name = reinterpret_cast<T*>(mt_smem_)
#endif

namespace megatrain::MT_CUDA_NS {

constexpr unsigned kFullMask = 0xffffffffu;

#ifndef MEGATRAIN_SIMT
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
#endif

inline unsigned ceil_div(long long a, long long b) { return static_cast<unsigned>((a + b - 1) / b); }

// Launches kernel(args...) on stream: a CUDA launch, or in a test the host emulation.
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, A... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch: argument count differs from the kernel's");
#ifdef MEGATRAIN_SIMT
  (void)stream;
  std::tuple<P...> typed(static_cast<P>(args)...);
  simt::launch(grid, block, smem_bytes, [&] { std::apply(kernel, typed); });
#else
  std::tuple<P...> typed(static_cast<P>(args)...);
  std::apply(
      [&](auto&... a) {
        void* argv[] = {static_cast<void*>(&a)...};
        check_cuda(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, argv, smem_bytes, stream),
                   "kernel launch");
      },
      typed);
#endif
}

// Sum over the lanes of a warp; every lane gets the total (butterfly: the same order on every lane).
__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over a block of whole warps (blockDim.x a multiple of 32, at most 1024); every thread gets the
// total. `scratch` is 32 floats of shared memory, free again when this returns.
__device__ inline float block_sum(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize, warp = static_cast<int>(threadIdx.x) / warpSize;
  const int warps = static_cast<int>(blockDim.x) / warpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

}  // namespace megatrain::MT_CUDA_NS
