// The two row operations of context parallelism's attention on the GPU (model/ring_attention.h, model/ulysses_attention.h):
// merging a block's partial attention into the running one by their log-sum-exps, and copying (or
// adding) rows of one strided view into another (packing key/value blocks, adding their gradients).
// A block per row (sequence b, row t), its threads along the row; each value is computed by the same
// float operations as the CPU ops (kernels/cpu/attention.cpp attention_merge).
#include "kernels/attention_block.h"
#include "kernels/cuda/common.cuh"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kThreads = 128;

// Row (b, t) of every head h: out = (e^(a−m)·out + e^(c−m)·part) / (e^(a−m) + e^(c−m)), lse = m + log(…).
__global__ void attention_merge_kernel(AttnView<float> out, float* lse, AttnView<const float> part,
                                       const float* part_lse, AttnBlock d) {
  const int64_t row = blockIdx.x;
  const int b = static_cast<int>(row / d.Tq), t = static_cast<int>(row % d.Tq);
  for (int h = 0; h < d.H; ++h) {
    const int64_t l0 = (static_cast<int64_t>(b) * d.H + h) * d.lse_ld + t;
    const float a = lse[l0], c = part_lse[l0], mx = fmaxf(a, c);
    const float wa = expf(a - mx), wc = expf(c - mx), inv = 1.0f / (wa + wc);
    float* o = out.at(b, t, h, d.D);
    const float* p = part.at(b, t, h, d.D);
    for (int e = static_cast<int>(threadIdx.x); e < d.D; e += kThreads) o[e] = (wa * o[e] + wc * p[e]) * inv;
    __syncthreads();  // every thread read lse[l0] before it is written
    if (threadIdx.x == 0) lse[l0] = mx + logf(wa + wc);
  }
}

__global__ void rows_copy_kernel(AttnView<float> dst, AttnView<const float> src, int n, int64_t width,
                                 bool accumulate) {
  const int64_t row = blockIdx.x;
  const int b = static_cast<int>(row / n), t = static_cast<int>(row % n);
  float* o = dst.at(b, t, 0, 0);
  const float* i = src.at(b, t, 0, 0);
  for (int64_t c = threadIdx.x; c < width; c += kThreads) o[c] = accumulate ? o[c] + i[c] : i[c];
}

}  // namespace

void attention_merge(cudaStream_t stream, AttnView<float> out, float* lse, AttnView<const float> part,
                     const float* part_lse, const AttnBlock& b) {
  const int64_t rows = static_cast<int64_t>(b.B) * b.Tq;
  if (rows == 0) return;
  launch(attention_merge_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream, out, lse, part, part_lse,
         b);
}

void attention_rows_copy(cudaStream_t stream, AttnView<float> dst, AttnView<const float> src, int B, int n,
                         int64_t width, bool accumulate) {
  const int64_t rows = static_cast<int64_t>(B) * n;
  if (rows == 0 || width == 0) return;
  launch(rows_copy_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream, dst, src, n, width,
         accumulate);
}

}  // namespace megatrain::MT_CUDA_NS
