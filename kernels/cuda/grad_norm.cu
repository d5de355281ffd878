// The gradient checks of an optimizer step over a list of float ranges (the grad buffers or a
// ZeRO shard of them): Σ x² for the global norm, and whether any value is NaN or ±Inf.
// Each range is cut into chunks of kChunk elements, one block per chunk; a launch carries up to
// kMaxRanges range descriptors with the index of each one's first block (like adamw.cu), longer
// lists take several launches. Σ x² is bitwise reproducible: each block sums its chunk in a fixed
// order into a double partial, stored at the block's index over the whole list, then one block
// adds the partials in a fixed order. No atomics.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/ops.h"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kBlock = 256;
constexpr int kChunk = 32 * kBlock;  // elements per block: 32 per thread, strided by the block
constexpr int kMaxRanges = 96;       // ranges per launch (the argument must stay under 4 KiB)
constexpr int kFinalBlock = 1024;

struct RangeLaunch {
  const float* x[kMaxRanges];
  int64_t n[kMaxRanges];
  unsigned first_block[kMaxRanges + 1];  // range r owns blocks [first_block[r], first_block[r + 1])
  int count;
};
static_assert(sizeof(RangeLaunch) + 64 <= 4096, "RangeLaunch must fit the kernel parameter space");

// This block's chunk: its range's pointer and [begin, end) within it (empty ranges own no block).
struct Chunk {
  const float* x;
  int64_t begin, end;
};
__device__ inline Chunk block_chunk(const RangeLaunch& L) {
  int lo = 0, hi = L.count - 1;  // the last r with first_block[r] ≤ blockIdx.x
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (L.first_block[mid] <= blockIdx.x)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t begin = static_cast<int64_t>(blockIdx.x - L.first_block[lo]) * kChunk;
  return {L.x[lo], begin, begin + kChunk < L.n[lo] ? begin + kChunk : L.n[lo]};
}

// Sum over a block of whole warps in double; every thread gets it. `scratch`: 32 doubles.
__device__ inline double block_sum_double(double v, double* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize, warp = static_cast<int>(threadIdx.x) / warpSize;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x) / warpSize ? scratch[lane] : 0.0;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  __syncthreads();
  return v;
}

__global__ void sum_squares_partials_kernel(double* partial, RangeLaunch L) {
  __shared__ double scratch[32];
  const Chunk c = block_chunk(L);
  double acc = 0.0;
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += kBlock) {
    const float v = c.x[i];
    acc += static_cast<double>(v * v);
  }
  acc = block_sum_double(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(double* out, const double* partial, int64_t n) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kFinalBlock) acc += partial[i];
  acc = block_sum_double(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

// Sets *flag = 1 when the block's chunk holds a NaN or ±Inf (every writer writes the same value).
__global__ void nonfinite_kernel(int* flag, RangeLaunch L) {
  const Chunk c = block_chunk(L);
  bool bad = false;
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += kBlock) bad |= !isfinite(c.x[i]);
  if (bad) *flag = 1;
}

// Calls each(launch, first block over the whole list, blocks) for the non-empty ranges, packed
// kMaxRanges to a launch; returns the blocks over the whole list.
template <class Each>
int64_t for_each_launch(const FloatRange* ranges, int count, Each each) {
  RangeLaunch L{};
  unsigned blocks = 0;
  int64_t done = 0;
  const auto flush = [&] {
    if (blocks > 0) each(L, done, blocks);
    done += blocks;
    L.count = 0;
    blocks = 0;
  };
  for (int i = 0; i < count; ++i) {
    if (ranges[i].n == 0) continue;
    const unsigned chunks = ceil_div(ranges[i].n, kChunk);
    // A launch holds kMaxRanges ranges and fewer than 2^31 blocks (the grid's x limit).
    if (L.count == kMaxRanges || static_cast<uint64_t>(blocks) + chunks >= (1u << 31)) flush();
    L.x[L.count] = ranges[i].data;
    L.n[L.count] = ranges[i].n;
    L.first_block[L.count] = blocks;
    blocks += chunks;
    L.first_block[++L.count] = blocks;
  }
  flush();
  return done;
}

}  // namespace

size_t sum_squares_scratch_doubles(const FloatRange* ranges, int count) {
  int64_t blocks = 0;
  for (int i = 0; i < count; ++i) blocks += ceil_div(ranges[i].n, kChunk);
  return static_cast<size_t>(blocks);
}

void sum_squares(cudaStream_t stream, double* out, const FloatRange* ranges, int count, double* scratch) {
  const int64_t blocks = for_each_launch(ranges, count, [&](const RangeLaunch& L, int64_t first, unsigned n) {
    launch(sum_squares_partials_kernel, dim3(n), dim3(kBlock), 0, stream, scratch + first, L);
  });
  launch(sum_partials_kernel, dim3(1), dim3(kFinalBlock), 0, stream, out, static_cast<const double*>(scratch), blocks);
}

void nonfinite_flag(cudaStream_t stream, int* flag, const FloatRange* ranges, int count) {
  for_each_launch(ranges, count, [&](const RangeLaunch& L, int64_t, unsigned n) {
    launch(nonfinite_kernel, dim3(n), dim3(kBlock), 0, stream, flag, L);
  });
}

}  // namespace megatrain::MT_CUDA_NS
