// AdamW with PyTorch semantics (torch.optim.AdamW, non-amsgrad):
//   p ← p·(1 − lr·wd);  m ← β₁m + (1−β₁)g;  v ← β₂v + (1−β₂)g²;
//   p ← p − (lr / (1−β₁ᵗ)) · m / (√v / √(1−β₂ᵗ) + ε).
#include <cmath>

#include "kernels/cpu/cpu.h"

namespace megatrain::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& st) {
  const float step_size = st.lr / st.bias_correction1;
  const float bc2_sqrt = std::sqrt(st.bias_correction2);
  const float decay = 1.0f - st.lr * st.weight_decay;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * st.grad_scale;
    const float mi = st.beta1 * m[i] + (1.0f - st.beta1) * g;
    const float vi = st.beta2 * v[i] + (1.0f - st.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + st.eps);
  }
}

}  // namespace megatrain::cpu
