// Softmax cross-entropy, forward and backward together (the gradient is written in place of the
// logits). Two forms:
// - the three vocabulary-parallel steps of ops.h (row maxima; exp-sums and target logits; losses
//   and (softmax − onehot)·scale), between which the caller reduces over the vocabulary shards;
// - one fused pass for an unsplit vocabulary: online max and sum, the loss, then the gradient, in
//   one kernel, so the row is read twice and written once instead of read three times and written
//   twice.
// One block per row (a row is a vocabulary, tens of thousands of columns): threads stride the row
// (coalesced), each thread's partial is reduced in a fixed order, so results are bitwise
// reproducible. Columns ≥ valid (padded vocabulary) take no part in the softmax and get gradient 0.
// A row whose target is negative (a masked position) has loss 0 and gradient 0.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kBlock = 256;  // threads per row

// Max over a block of whole warps; every thread gets it. `scratch`: 32 floats of shared memory.
__device__ inline float block_max(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize, warp = static_cast<int>(threadIdx.x) / warpSize;
  const int warps = static_cast<int>(blockDim.x) / warpSize;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// The row's target column on this shard, or −1 when the target lies on another shard (or padding).
__device__ inline int64_t local_target(const int32_t* targets, int64_t row, int valid, int vocab_begin) {
  const int64_t t = static_cast<int64_t>(targets[row]) - vocab_begin;
  return t >= 0 && t < valid ? t : -1;
}

__global__ void cross_entropy_max_kernel(float* row_max, const float* logits, int V, int valid) {
  __shared__ float scratch[32];
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * V;
  float mx = -INFINITY;
  for (int j = static_cast<int>(threadIdx.x); j < valid; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = mx;
}

// The thread owning the target column reads it before overwriting it with its exponential, so no
// barrier is needed between the read and the writes.
__global__ void cross_entropy_sums_kernel(float* sum_exp, float* target_logit, float* logits, const float* row_max,
                                          const int32_t* targets, int V, int valid, int vocab_begin, bool store_exp) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  float* x = logits + row * V;
  const float mx = row_max[row];
  const int64_t t = local_target(targets, row, valid, vocab_begin);
  if (t < 0 && threadIdx.x == 0) target_logit[row] = 0.0f;
  float sum = 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j < valid; j += blockDim.x) {
    const float v = x[j];
    if (j == t) target_logit[row] = v;
    const float e = expf(v - mx);
    if (store_exp) x[j] = e;
    sum += e;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) sum_exp[row] = sum;
}

__global__ void cross_entropy_losses_kernel(float* losses, const float* row_max, const float* sum_exp,
                                            const float* target_logit, const int32_t* targets, int64_t N) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < N) losses[i] = targets[i] >= 0 ? logf(sum_exp[i]) + row_max[i] - target_logit[i] : 0.0f;
}

// The exponentials stored by the sums step become (softmax − onehot)·scale; padding becomes 0.
__global__ void cross_entropy_finish_kernel(float* losses, float* dlogits, const float* row_max, const float* sum_exp,
                                            const float* target_logit, const int32_t* targets, int V, int valid,
                                            int vocab_begin, float scale) {
  const int64_t row = blockIdx.x;
  const bool counted = targets[row] >= 0;
  if (threadIdx.x == 0) losses[row] = counted ? logf(sum_exp[row]) + row_max[row] - target_logit[row] : 0.0f;
  float* x = dlogits + row * V;
  const float f = counted ? scale / sum_exp[row] : 0.0f;
  const int64_t t = local_target(targets, row, valid, vocab_begin);
  for (int j = static_cast<int>(threadIdx.x); j < V; j += blockDim.x)
    x[j] = j < valid ? x[j] * f - (j == t ? scale : 0.0f) : 0.0f;
}

// (m, s) ← the online-softmax state of both halves: s·e^(m − max) + s2·e^(m2 − max). Two empty
// states (max −inf) stay empty instead of turning into NaN.
__device__ inline void merge_max_sum(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

// Loss and, with `grad`, the gradient in place, for a row whose vocabulary is not split. Each thread
// keeps a running (max, sum) over its columns, rescaling the sum when the max grows; the threads'
// states merge over the warp (butterfly) and then over the warps in warp order.
__global__ void cross_entropy_fused_kernel(float* losses, float* logits, const int32_t* targets, int V, int valid,
                                           float scale, bool grad) {
  __shared__ float warp_m[32], warp_s[32];
  const int64_t row = blockIdx.x;
  float* x = logits + row * V;
  const int64_t t = local_target(targets, row, valid, 0);
  // Read before the barriers below; the gradient writes come after them.
  const float target = t >= 0 ? x[t] : 0.0f;
  float m = -INFINITY, s = 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j < valid; j += blockDim.x) {
    const float v = x[j];
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += v == -INFINITY ? 0.0f : expf(v - m);  // NaN still propagates
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(kFullMask, m, offset), s2 = __shfl_xor_sync(kFullMask, s, offset);
    merge_max_sum(m, s, m2, s2);
  }
  const int lane = static_cast<int>(threadIdx.x) % warpSize, warp = static_cast<int>(threadIdx.x) / warpSize;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  m = warp_m[0];
  s = warp_s[0];
  for (int w = 1; w < static_cast<int>(blockDim.x) / warpSize; ++w) merge_max_sum(m, s, warp_m[w], warp_s[w]);
  const bool counted = targets[row] >= 0;
  if (threadIdx.x == 0) losses[row] = counted ? logf(s) + m - target : 0.0f;
  if (!grad) return;
  const float f = counted ? scale / s : 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j < V; j += blockDim.x)
    x[j] = j < valid ? expf(x[j] - m) * f - (j == t ? scale : 0.0f) : 0.0f;
}

}  // namespace

void cross_entropy_max(cudaStream_t stream, float* row_max, const float* logits, int64_t N, int V, int valid) {
  if (N == 0) return;
  launch(cross_entropy_max_kernel, dim3(static_cast<unsigned>(N)), dim3(kBlock), 0, stream, row_max, logits, V,
         valid);
}

void cross_entropy_sums(cudaStream_t stream, float* sum_exp, float* target_logit, float* logits, const float* row_max,
                        const int32_t* targets, int64_t N, int V, int valid, int vocab_begin, bool store_exp) {
  if (N == 0) return;
  launch(cross_entropy_sums_kernel, dim3(static_cast<unsigned>(N)), dim3(kBlock), 0, stream, sum_exp, target_logit,
         logits, row_max, targets, V, valid, vocab_begin, store_exp);
}

void cross_entropy_finish(cudaStream_t stream, float* losses, float* dlogits, const float* row_max,
                          const float* sum_exp, const float* target_logit, const int32_t* targets, int64_t N, int V,
                          int valid, int vocab_begin, float scale) {
  if (N == 0) return;
  if (!dlogits) {
    launch(cross_entropy_losses_kernel, dim3(ceil_div(N, kBlock)), dim3(kBlock), 0, stream, losses, row_max, sum_exp,
           target_logit, targets, N);
    return;
  }
  launch(cross_entropy_finish_kernel, dim3(static_cast<unsigned>(N)), dim3(kBlock), 0, stream, losses, dlogits,
         row_max, sum_exp, target_logit, targets, V, valid, vocab_begin, scale);
}

void cross_entropy_fused(cudaStream_t stream, float* losses, float* logits, const int32_t* targets, int64_t N, int V,
                         int valid, float scale, bool grad) {
  if (N == 0) return;
  launch(cross_entropy_fused_kernel, dim3(static_cast<unsigned>(N)), dim3(kBlock), 0, stream, losses, logits, targets,
         V, valid, scale, grad);
}

}  // namespace megatrain::MT_CUDA_NS
