// What the memory-bound kernels (elementwise, activation, embedding, rope) share: a grid sized to
// fill the GPU and no more (grid-stride loops do the rest), float4 loads and stores where every
// pointer allows them, and two loop shapes that call a functor on W consecutive floats at a time:
// - flat_map: over n values, in groups of W (4 when vectorised) and then the last n % W one by one;
// - row_map: over the rows of an (N, ·) problem, a block per row, its threads over W-wide column
//   groups (so a per-row value such as a token id is read once per block, with no division).
// A functor has `template <int W> __device__ void apply(...) const`, W being 4 or 1.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace megatrain::MT_CUDA_NS {

// Streaming multiprocessors of the current device. The emulation has one, so that grid-stride
// loops wrap at the small sizes the tests use.
inline int sm_count() {
#ifdef MEGATRAIN_SIMT
  return 1;
#else
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  return sms;
#endif
}

// Blocks for `work` items at `threads` a block: one item each, capped at a full GPU (2048 resident
// threads per SM on A100 and H100); at least one.
inline unsigned grid_blocks(int64_t work, int threads) {
  const int64_t cap = static_cast<int64_t>(sm_count()) * (2048 / threads);
  const int64_t want = (work + threads - 1) / threads;
  return static_cast<unsigned>(want < 1 ? 1 : (want < cap ? want : cap));
}

// True when every pointer is 16-byte aligned (float4 access is then legal at multiples of 4 floats).
template <class... P>
bool aligned16(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// W consecutive floats from p into v, and back.
template <int W>
__device__ inline void load(float (&v)[W], const float* p) {
  if constexpr (W == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else {
    for (int k = 0; k < W; ++k) v[k] = p[k];
  }
}
template <int W>
__device__ inline void store(float* p, const float (&v)[W]) {
  if constexpr (W == 4) {
    float4 t;
    t.x = v[0], t.y = v[1], t.z = v[2], t.w = v[3];
    *reinterpret_cast<float4*>(p) = t;
  } else {
    for (int k = 0; k < W; ++k) p[k] = v[k];
  }
}

constexpr int kMapThreads = 256;

template <int W, class F>
__global__ void flat_map_kernel(int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t body = n / W * W;
  for (int64_t i = tid * W; i < body; i += stride * W) f.template apply<W>(i);
  for (int64_t i = body + tid; i < n; i += stride) f.template apply<1>(i);
}

// f.apply<W>(i) for i = 0, W, 2W, … (W = 4 when `vec4`, the pointers f uses being 16-byte aligned),
// then f.apply<1>(i) for the rest.
template <class F>
void flat_map(cudaStream_t stream, int64_t n, bool vec4, F f) {
  if (n <= 0) return;
  if (vec4)
    launch(flat_map_kernel<4, F>, dim3(grid_blocks(ceil_div(n, 4), kMapThreads)), dim3(kMapThreads), 0, stream, n, f);
  else
    launch(flat_map_kernel<1, F>, dim3(grid_blocks(n, kMapThreads)), dim3(kMapThreads), 0, stream, n, f);
}

template <int W, class F>
__global__ void row_map_kernel(int64_t N, int C, F f) {
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x)
    for (int c = static_cast<int>(threadIdx.x) * W; c < C; c += static_cast<int>(blockDim.x) * W)
      f.template apply<W>(row, c);
}

// f.apply<W>(row, c) for every row < N and c = 0, W, 2W, … < C; W = 4 when `vec4` (C a multiple of
// 4 and the pointers 16-byte aligned), else 1. Threads per block: the column groups rounded up to
// a warp, at most kMapThreads.
template <class F>
void row_map(cudaStream_t stream, int64_t N, int C, bool vec4, F f) {
  if (N <= 0 || C <= 0) return;
  const int groups = vec4 ? C / 4 : C;
  const int warps = static_cast<int>(ceil_div(groups, 32));
  const int threads = warps * 32 < kMapThreads ? warps * 32 : kMapThreads;
  const unsigned blocks = grid_blocks(N * threads, threads);
  if (vec4)
    launch(row_map_kernel<4, F>, dim3(blocks), dim3(threads), 0, stream, N, C, f);
  else
    launch(row_map_kernel<1, F>, dim3(blocks), dim3(threads), 0, stream, N, C, f);
}

}  // namespace megatrain::MT_CUDA_NS
