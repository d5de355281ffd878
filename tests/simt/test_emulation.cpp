// The host SIMT emulation itself (tests/simt/simt.h): barriers, warp shuffles and votes, shared
// memory, and the misuse it must report instead of computing something.
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include "tests/simt/simt.h"

namespace {

// A block reduction the way kernels write it: per-warp butterflies, partials through static
// shared memory behind __syncthreads, then one warp over the partials.
void block_sum_kernel(float* out, const float* in, int n) {
  __shared__ float partial[32];
  const int t = static_cast<int>(threadIdx.x), lane = t % warpSize, warp = t / warpSize;
  float v = 0.0f;
  for (int i = static_cast<int>(blockIdx.x * blockDim.x) + t; i < n; i += static_cast<int>(gridDim.x * blockDim.x))
    v += in[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x) / warpSize ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) atomicAdd(out, v);
  }
}

TEST(SimtEmulation, BlockReductionThroughSharedMemoryAndShuffles) {
  std::vector<float> in(1000);
  std::iota(in.begin(), in.end(), 1.0f);
  float out = 0.0f;
  simt::launch(dim3(3), dim3(128), 0, [&] { block_sum_kernel(&out, in.data(), 1000); });
  EXPECT_EQ(out, 500500.0f);
}

TEST(SimtEmulation, ShufflesVotesAndIndices) {
  std::vector<int> up(64), down(64), idx(64), ballot(64), any(64), all(64);
  simt::launch(dim3(2), dim3(16, 2), 0, [&] {
    const int t = static_cast<int>(blockIdx.x * 32 + threadIdx.y * 16 + threadIdx.x);
    const int lane = static_cast<int>(threadIdx.y * 16 + threadIdx.x);
    up[t] = __shfl_up_sync(0xffffffffu, lane, 3);
    down[t] = __shfl_down_sync(0xffffffffu, lane, 5, 16);
    idx[t] = __shfl_sync(0xffffffffu, lane * 10, 7);
    ballot[t] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
    any[t] = __any_sync(0xffffffffu, lane == 31);
    all[t] = __all_sync(0xffffffffu, lane < 31);
  });
  unsigned want_ballot = 0;
  for (int l = 0; l < 32; l += 3) want_ballot |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    EXPECT_EQ(up[t], lane < 3 ? lane : lane - 3) << t;
    EXPECT_EQ(down[t], lane % 16 + 5 < 16 ? lane + 5 : lane) << t;
    EXPECT_EQ(idx[t], 70) << t;
    EXPECT_EQ(static_cast<unsigned>(ballot[t]), want_ballot) << t;
    EXPECT_EQ(any[t], 1) << t;
    EXPECT_EQ(all[t], 0) << t;
  }
}

TEST(SimtEmulation, PartialWarpAndEarlyExitBeforeABarrier) {
  // 40 threads: the second warp has 8 lanes. Threads 30-39 return early; the rest still meet at
  // __syncthreads (exited threads are not waited for) and shuffle within their live lanes.
  std::vector<int> seen(40, -1);
  simt::launch(dim3(1), dim3(40), 0, [&] {
    __shared__ int flag;
    const int t = static_cast<int>(threadIdx.x);
    if (t >= 30) return;
    if (t == 0) flag = 7;
    __syncthreads();
    seen[t] = flag + __shfl_xor_sync(0x3fffffffu, t, 1);
  });
  for (int t = 0; t < 30; ++t) EXPECT_EQ(seen[t], 7 + (t ^ 1)) << t;
  for (int t = 30; t < 40; ++t) EXPECT_EQ(seen[t], -1) << t;
}

TEST(SimtEmulation, DynamicSharedMemoryStartsAsNaN) {
  float first = 0.0f;
  simt::launch(dim3(1), dim3(32), 64, [&] {
    float* s = static_cast<float*>(simt::dynamic_shared());
    if (threadIdx.x == 0) first = s[3];
  });
  EXPECT_TRUE(std::isnan(first));
}

TEST(SimtEmulation, ReportsDeadlockAndBadMasks) {
  // Half a warp at __syncthreads, the other half at a warp barrier waiting for the first half.
  EXPECT_THROW(simt::launch(dim3(1), dim3(32), 0,
                            [] {
                              if (threadIdx.x < 16)
                                __syncthreads();
                              else
                                __syncwarp();
                            }),
               std::runtime_error);
  // A full mask in a warp of 20 threads names lanes that do not exist.
  EXPECT_THROW(simt::launch(dim3(1), dim3(20), 0, [] { (void)__shfl_xor_sync(0xffffffffu, 1, 1); }),
               std::runtime_error);
  // A lane shuffles after its partner has exited.
  EXPECT_THROW(simt::launch(dim3(1), dim3(32), 0,
                            [] {
                              if (threadIdx.x == 5) return;
                              (void)__shfl_xor_sync(0xffffffffu, 1, 1);
                            }),
               std::runtime_error);
  // A lane outside its own mask.
  EXPECT_THROW(simt::launch(dim3(1), dim3(32), 0, [] { (void)__shfl_xor_sync(0x1u, 1, 1); }), std::runtime_error);
  // The next launch after an error works.
  int n = 0;
  simt::launch(dim3(2), dim3(64), 0, [&] { atomicAdd(&n, 1); });
  EXPECT_EQ(n, 128);
}

}  // namespace
