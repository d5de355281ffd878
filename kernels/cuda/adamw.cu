// Multi-tensor AdamW on float32 master weights (apex's multi_tensor_apply): one launch updates a
// list of (param, grad, m, v, n) ranges. The launch argument carries up to kMaxRanges range
// descriptors and the index of each range's first block; every range is cut into chunks of
// kChunk elements, one block per chunk, and a block finds its range by a search over those
// indices. Longer lists take several launches. The arithmetic is cpu::adamw_update's, in the same
// order, so results agree to the rounding of sqrt and division.
#include "kernels/cuda/common.cuh"
#include "kernels/ops.h"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kBlock = 256;
constexpr int kChunk = 16 * kBlock;  // elements per block: 16 per thread, strided by the block
constexpr int kMaxRanges = 48;      // keeps the launch argument under the 4 KiB parameter limit

struct AdamWLaunch {
  float* param[kMaxRanges];
  const float* grad[kMaxRanges];
  float* m[kMaxRanges];
  float* v[kMaxRanges];
  int64_t n[kMaxRanges];
  unsigned first_block[kMaxRanges + 1];  // range r owns blocks [first_block[r], first_block[r + 1])
  int count;
};
static_assert(sizeof(AdamWLaunch) + 64 <= 4096, "AdamWLaunch must fit the kernel parameter space");

// The per-step constants, derived once on the host exactly as the CPU op derives them.
struct AdamWConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, step_size, bc2_sqrt, decay, grad_scale;
};

// The range owning block b: the last r with first_block[r] ≤ b (empty ranges own no block).
__device__ inline int owning_range(const unsigned* first_block, int count, unsigned b) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_block[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void adamw_kernel(AdamWLaunch L, AdamWConstants c) {
  const int r = owning_range(L.first_block, L.count, blockIdx.x);
  const int64_t begin = static_cast<int64_t>(blockIdx.x - L.first_block[r]) * kChunk;
  const int64_t end = begin + kChunk < L.n[r] ? begin + kChunk : L.n[r];
  float *param = L.param[r], *m = L.m[r], *v = L.v[r];
  const float* grad = L.grad[r];
  for (int64_t i = begin + threadIdx.x; i < end; i += kBlock) {
    const float g = grad[i] * c.grad_scale;
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * c.decay - c.step_size * mi / (sqrtf(vi) / c.bc2_sqrt + c.eps);
  }
}

}  // namespace

void adamw_update(cudaStream_t stream, const AdamWRange* ranges, int count, const AdamWStep& st) {
  const AdamWConstants c{st.beta1,
                         st.beta2,
                         1.0f - st.beta1,
                         1.0f - st.beta2,
                         st.eps,
                         st.lr / st.bias_correction1,
                         std::sqrt(st.bias_correction2),
                         1.0f - st.lr * st.weight_decay,
                         st.grad_scale};
  AdamWLaunch L{};
  unsigned blocks = 0;
  const auto flush = [&] {
    if (blocks > 0) launch(adamw_kernel, dim3(blocks), dim3(kBlock), 0, stream, L, c);
    L.count = 0;
    blocks = 0;
  };
  for (int i = 0; i < count; ++i) {
    const AdamWRange& a = ranges[i];
    if (a.n == 0) continue;
    const unsigned chunks = ceil_div(a.n, kChunk);
    // A launch holds kMaxRanges ranges and fewer than 2^31 blocks (the grid's x limit).
    if (L.count == kMaxRanges || static_cast<uint64_t>(blocks) + chunks >= (1u << 31)) flush();
    L.param[L.count] = a.param;
    L.grad[L.count] = a.grad;
    L.m[L.count] = a.m;
    L.v[L.count] = a.v;
    L.n[L.count] = a.n;
    L.first_block[L.count] = blocks;
    blocks += chunks;
    L.first_block[++L.count] = blocks;
  }
  flush();
}

}  // namespace megatrain::MT_CUDA_NS
