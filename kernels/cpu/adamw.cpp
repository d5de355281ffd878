// AdamW with PyTorch semantics (torch.optim.AdamW, non-amsgrad):
//   p ← p·(1 − lr·wd);  m ← β₁m + (1−β₁)g;  v ← β₂v + (1−β₂)g²;
//   p ← p − (lr / (1−β₁ᵗ)) · m / (√v / √(1−β₂ᵗ) + ε).
// [Note: fused 16-bit copy] With a 16-bit copy (mixed precision) the same pass also writes the
// updated p rounded to bf16 or fp16 — the bits f32_to_half gives (kernels/half.h) — so the masters
// are not read a second time from memory to make the copy compute reads (a block is rounded while
// it is still in cache). Both forms run one element function, over either moment storage.
#include <cmath>

#include "kernels/cpu/cpu.h"
#include "kernels/half.h"

namespace megatrain::cpu {
namespace {

struct Constants {
  float step_size, bc2_sqrt, decay;
};

Constants constants_of(const AdamWStep& st) {
  return {st.lr / st.bias_correction1, std::sqrt(st.bias_correction2), 1.0f - st.lr * st.weight_decay};
}

// Where the moments live. [Note: 16-bit moments] With bf16 moments (optimizer.state_dtype) each
// is widened to float32 on load, the update computed in float32 with the new moments as they are,
// and each stored rounded to nearest even (float_to_bf16, kernels/half.h): the masters and the
// arithmetic are those of float32 moments, only what is kept between steps is 16-bit.
struct F32Moments {
  float *m, *v;
  float m_at(int64_t i) const { return m[i]; }
  float v_at(int64_t i) const { return v[i]; }
  void store(int64_t i, float mi, float vi) const { m[i] = mi, v[i] = vi; }
};
struct Bf16Moments {
  uint16_t *m, *v;
  float m_at(int64_t i) const { return bf16_to_float(m[i]); }
  float v_at(int64_t i) const { return bf16_to_float(v[i]); }
  void store(int64_t i, float mi, float vi) const { m[i] = float_to_bf16(mi), v[i] = float_to_bf16(vi); }
};

// Element i's update; returns the new parameter.
template <class Moments>
inline float update_one(float* param, const float* grad, const Moments& mo, int64_t i, const AdamWStep& st,
                        const Constants& c) {
  const float g = grad[i] * st.grad_scale;
  const float mi = st.beta1 * mo.m_at(i) + (1.0f - st.beta1) * g;
  const float vi = st.beta2 * mo.v_at(i) + (1.0f - st.beta2) * g * g;
  mo.store(i, mi, vi);
  const float p = param[i] * c.decay - c.step_size * mi / (std::sqrt(vi) / c.bc2_sqrt + st.eps);
  param[i] = p;
  return p;
}

template <class Moments>
void update(float* param, const float* grad, const Moments& mo, int64_t n, const AdamWStep& st) {
  const Constants c = constants_of(st);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) update_one(param, grad, mo, i, st, c);
}

// Blocks of kBlock elements: the vectorised update, then the rounding of the block while it is in
// L1 (fp16's rounding branches, which would keep the update from vectorising in one loop).
template <class Moments, class Round>
void update_rounding(float* param, uint16_t* param16, const float* grad, const Moments& mo, int64_t n,
                     const AdamWStep& st, Round round) {
  constexpr int64_t kBlock = 1024;
  const Constants c = constants_of(st);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = b + kBlock < n ? b + kBlock : n;
#pragma omp simd
    for (int64_t i = b; i < e; ++i) update_one(param, grad, mo, i, st, c);
    for (int64_t i = b; i < e; ++i) param16[i] = round(param[i]);
  }
}

template <class Moments>
void update_rounding(float* param, uint16_t* param16, Precision p, const float* grad, const Moments& mo, int64_t n,
                     const AdamWStep& st) {
  if (p == Precision::bf16)
    update_rounding(param, param16, grad, mo, n, st, [](float x) { return float_to_bf16(x); });
  else
    update_rounding(param, param16, grad, mo, n, st, [](float x) { return float_to_fp16(x); });
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& st) {
  update(param, grad, F32Moments{m, v}, n, st);
}

void adamw_update(float* param, const float* grad, uint16_t* m, uint16_t* v, int64_t n, const AdamWStep& st) {
  update(param, grad, Bf16Moments{m, v}, n, st);
}

void adamw_update(float* param, uint16_t* param16, Precision p, const float* grad, float* m, float* v, int64_t n,
                  const AdamWStep& st) {
  update_rounding(param, param16, p, grad, F32Moments{m, v}, n, st);
}

void adamw_update(float* param, uint16_t* param16, Precision p, const float* grad, uint16_t* m, uint16_t* v, int64_t n,
                  const AdamWStep& st) {
  update_rounding(param, param16, p, grad, Bf16Moments{m, v}, n, st);
}

}  // namespace megatrain::cpu
