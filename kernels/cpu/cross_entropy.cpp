// Softmax cross-entropy on CPU over a vocabulary shard, in the three steps of ops.h: row maxima,
// then exp-sums and target logits, then losses and (softmax − onehot) · scale in place of the
// logits, so no separate (N, V) gradient buffer is needed. Columns ≥ valid (padded vocabulary) are
// excluded from the softmax and get zero gradient. A row whose target is negative (a masked position,
// data.eod_mask_loss or a loss mask) has loss 0 and gradient 0.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec.h"

namespace megatrain::cpu {

void cross_entropy_max(float* row_max, const float* logits, int64_t N, int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * V;
    float mx = -INFINITY;
    for (int j = 0; j < valid; ++j) mx = std::max(mx, x[j]);
    row_max[i] = mx;
  }
}

void cross_entropy_sums(float* sum_exp, float* target_logit, float* logits, const float* row_max,
                        const int32_t* targets, int64_t N, int V, int valid, int vocab_begin, bool store_exp) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* x = logits + i * V;
    const float mx = row_max[i];
    const int64_t t = static_cast<int64_t>(targets[i]) - vocab_begin;
    target_logit[i] = t >= 0 && t < valid ? x[t] : 0.0f;
    float sum = 0.0f;
    if (store_exp) {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < valid; ++j) {
        x[j] = fast_exp(x[j] - mx);
        sum += x[j];
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < valid; ++j) sum += fast_exp(x[j] - mx);
    }
    sum_exp[i] = sum;
  }
}

void cross_entropy_finish(float* losses, float* dlogits, const float* row_max, const float* sum_exp,
                          const float* target_logit, const int32_t* targets, int64_t N, int V, int valid,
                          int vocab_begin, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const bool counted = targets[i] >= 0;  // a target < 0 is left out: loss 0, gradient 0
    losses[i] = counted ? std::log(sum_exp[i]) + row_max[i] - target_logit[i] : 0.0f;
    if (!dlogits) continue;
    float* x = dlogits + i * V;
    if (!counted) {
      std::fill(x, x + V, 0.0f);
      continue;
    }
    const float f = scale / sum_exp[i];
#pragma omp simd
    for (int j = 0; j < valid; ++j) x[j] *= f;
    std::fill(x + valid, x + V, 0.0f);
    const int64_t t = static_cast<int64_t>(targets[i]) - vocab_begin;
    if (t >= 0 && t < valid) x[t] -= scale;
  }
}

}  // namespace megatrain::cpu
