// Host SIMT emulation: the CUDA kernels' own source (kernels/cuda/*.cu), compiled by the host
// compiler and run on the CPU, so their logic is tested without a GPU.
//
// A test includes this header, then the kernel's .cu file. A launch runs the grid's blocks in
// turn; a block's threads are fibers (ucontext) that run one at a time and switch only at
// synchronisation points: __syncthreads, __syncwarp, warp shuffles and votes. That is enough for
// kernels written to the CUDA memory model (every shared-memory hand-over behind a barrier), and
// it is stricter than a GPU about the rest:
// - a barrier that not every live thread of the block reaches is a deadlock, reported;
// - a warp operation whose mask names a lane that does not exist or has exited, or that a lane
//   calls without being in the mask, is an error (undefined behaviour on a GPU);
// - dynamic shared memory is filled with 0xFF bytes (NaN as float) before each block, so a read
//   of a value no thread wrote shows up.
// Two orders of running a block's threads between synchronisation points, chosen by the
// environment (ctest runs every test under both): round robin (default: every ready thread once,
// in thread order, then again), and SIMT_SCHEDULE=warps_ahead (the last warp runs as far as it can
// on its own, then the one before it, ...), which exposes a warp that overwrites shared memory
// another warp has not read yet when the barrier between them is missing.
// Static __shared__ arrays are function-local statics here: one copy, shared by the block's
// threads, reused by the next block (uninitialised on a GPU too).
// Atomics are plain read-modify-writes: only one fiber runs at a time.
#pragma once
#define MEGATRAIN_SIMT 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#undef __shared__
#define __shared__ static
// An occupancy hint to nvcc's register allocator; nothing to emulate.
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

namespace simt {

// Runs body for every thread of every block of the grid (see the top of this file).
// Errors (deadlock, bad masks, too large a launch) throw std::runtime_error naming the block.
void launch(dim3 grid, dim3 block, size_t dynamic_smem_bytes, const std::function<void()>& body);
// The running block's dynamic shared memory.
void* dynamic_shared();
size_t dynamic_shared_bytes();

void syncthreads();
// Warp exchange: every lane in mask deposits `bits` (up to 8 bytes) and waits for the others;
// returns the deposit of lane `src` (the caller's own when src is outside its width-segment).
uint64_t warp_exchange(unsigned mask, uint64_t bits, int src_lane, int width);
// Warp vote: the ballot of predicates over the lanes of mask.
unsigned warp_ballot(unsigned mask, bool predicate);
void syncwarp(unsigned mask);
unsigned lane_id();

template <class T>
T shuffle(unsigned mask, T v, int src, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a type over 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(mask, bits, src, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace simt

// ---- the CUDA device API the kernels use, on the host ----
inline void __syncthreads() { simt::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { simt::syncwarp(mask); }
inline void __threadfence() {}
inline void __threadfence_block() {}

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize) {
  int lane = static_cast<int>(simt::lane_id());
  return simt::shuffle(mask, v, (lane / width) * width + src_lane % width, width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  return simt::shuffle(mask, v, static_cast<int>(simt::lane_id()) ^ lane_mask, width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return simt::shuffle(mask, v, static_cast<int>(simt::lane_id() + delta), width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  int lane = static_cast<int>(simt::lane_id());
  int src = lane - static_cast<int>(delta);
  return simt::shuffle(mask, v, src < (lane / width) * width ? lane : src, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) { return simt::warp_ballot(mask, predicate != 0); }
inline int __any_sync(unsigned mask, int predicate) { return simt::warp_ballot(mask, predicate != 0) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
  return simt::warp_ballot(mask, predicate != 0) == simt::warp_ballot(mask, true);
}

template <class T>
T atomicAdd(T* address, T v) {
  T old = *address;
  *address = old + v;
  return old;
}
template <class T>
T atomicMax(T* address, T v) {
  T old = *address;
  *address = old < v ? v : old;
  return old;
}
template <class T>
T atomicMin(T* address, T v) {
  T old = *address;
  *address = v < old ? v : old;
  return old;
}
template <class T>
T atomicExch(T* address, T v) {
  T old = *address;
  *address = v;
  return old;
}
template <class T>
T atomicCAS(T* address, T compare, T v) {
  T old = *address;
  if (old == compare) *address = v;
  return old;
}
inline unsigned atomicOr(unsigned* address, unsigned v) {
  unsigned old = *address;
  *address = old | v;
  return old;
}

template <class T>
T __ldg(const T* p) {
  return *p;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::isfinite;  // CUDA's device isfinite and isnan, unqualified as the kernels call them
using std::isnan;
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
