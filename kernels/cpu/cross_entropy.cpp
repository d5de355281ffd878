// Fused softmax + cross-entropy on CPU over the first V of Vp logits per row (padded vocabulary
// columns are excluded from the softmax and get zero gradient). With grad, the logits row is
// overwritten by (softmax − onehot) · scale, so no separate (N, Vp) gradient buffer is needed.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec.h"

namespace megatrain::cpu {

void cross_entropy_forward(float* losses, float* logits, const int32_t* targets, int64_t N, int Vp, int V,
                           bool grad, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* x = logits + i * Vp;
    float mx = x[0];
    for (int j = 1; j < V; ++j) mx = std::max(mx, x[j]);
    const float xt = x[targets[i]];
    float sum = 0.0f;
    if (grad) {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < V; ++j) {
        x[j] = fast_exp(x[j] - mx);
        sum += x[j];
      }
      const float f = scale / sum;
#pragma omp simd
      for (int j = 0; j < V; ++j) x[j] *= f;
      x[targets[i]] -= scale;
      std::fill(x + V, x + Vp, 0.0f);
    } else {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < V; ++j) sum += fast_exp(x[j] - mx);
    }
    losses[i] = std::log(sum) + mx - xt;
  }
}

}  // namespace megatrain::cpu
