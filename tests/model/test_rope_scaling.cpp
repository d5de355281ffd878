// RoPE scaling (kernels/rope_frequencies.h, model/config.h rope_frequencies): each scaling's
// frequencies at pairs chosen to meet each of its cases, the numbers worked by hand from
// transformers' definitions (modeling_rope_utils: _compute_linear_scaling_rope_parameters,
// _compute_llama3_parameters, _compute_yarn_parameters); YaRN's ramp bounds and attention factor
// as transformers derives them from beta_fast / beta_slow; and the rope op at those frequencies
// against a direct evaluation, its backward the transpose (backward ∘ forward = m² · identity for
// YaRN's attention factor m). The model against transformers' own:
// tests/reference/hf_logits_reference.py and hf_train_reference.py.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {

// Head size 16, θ = 10⁴: b_j = 10⁴^(−j/8), wavelength 2π / b_j = 6.28, 19.9, 62.8, … for j = 0, 1, 2.
ModelConfig model_with(RopeScaling kind) {
  ModelConfig m;
  m.d_model = 64;
  m.n_heads = 4;
  m.max_seq_len = 32;
  m.position = PositionKind::rope;
  m.rope_scaling.kind = kind;
  m.rope_scaling.factor = 8.0f;
  m.rope_scaling.original_max_len = kind == RopeScaling::llama3 ? 32 : 0;
  return m;
}

double base(int j) { return std::pow(10000.0, -j / 8.0); }

TEST(RopeFrequencies, EachScalingAtEachOfItsCases) {
  const int D = 16;
  const RopeFrequencies none = rope_frequencies(model_with(RopeScaling::none));
  const RopeFrequencies linear = rope_frequencies(model_with(RopeScaling::linear));
  const RopeFrequencies llama3 = rope_frequencies(model_with(RopeScaling::llama3));
  for (int j : {0, 1, 5}) {
    EXPECT_DOUBLE_EQ(rope_inv_freq(none, j, D), base(j));
    EXPECT_DOUBLE_EQ(rope_inv_freq(linear, j, D), base(j) / 8.0);
  }
  // llama3 with L = 32, low 1, high 4: λ < 8 keeps b_j (j = 0), λ > 32 divides by 8 (j ≥ 2), and
  // j = 1 (λ = 19.87) blends with s = (32 / 19.87 − 1) / 3 = 0.2035.
  EXPECT_DOUBLE_EQ(rope_inv_freq(llama3, 0, D), 1.0);
  const double s = (32.0 * base(1) / (2 * M_PI) - 1.0) / 3.0;
  EXPECT_NEAR(s, 0.2035, 1e-4);
  EXPECT_DOUBLE_EQ(rope_inv_freq(llama3, 1, D), (1 - s) * base(1) / 8.0 + s * base(1));
  EXPECT_DOUBLE_EQ(rope_inv_freq(llama3, 2, D), base(2) / 8.0);
  EXPECT_DOUBLE_EQ(llama3.attention, 1.0f);
}

TEST(RopeFrequencies, YarnRampAndAttentionFactorAsTransformersDerivesThem) {
  // Pair bounds 16·ln(32 / (β·2π)) / (2·ln 10⁴): −1.60 for β = 32 (floor, clamped to 0) and 1.41
  // for β = 1 (ceil: 2); so j = 0 keeps b_j, j = 1 is half-way, j ≥ 2 divides by the factor.
  const RopeFrequencies f = rope_frequencies(model_with(RopeScaling::yarn));
  EXPECT_EQ(f.ramp_low, 0.0);
  EXPECT_EQ(f.ramp_high, 2.0);
  EXPECT_FLOAT_EQ(f.attention, static_cast<float>(0.1 * std::log(8.0) + 1.0));
  const int D = 16;
  EXPECT_DOUBLE_EQ(rope_inv_freq(f, 0, D), 1.0);
  EXPECT_DOUBLE_EQ(rope_inv_freq(f, 1, D), 0.5 * base(1) / 8.0 + 0.5 * base(1));
  EXPECT_DOUBLE_EQ(rope_inv_freq(f, 3, D), base(3) / 8.0);
  // An original context of 16 moves the bounds (β = 1: 16·ln(16 / 2π) / 18.42 = 0.81, ceil 1); a
  // given attention factor replaces 0.1·ln(factor) + 1.
  ModelConfig m = model_with(RopeScaling::yarn);
  m.rope_scaling.original_max_len = 16;
  m.rope_scaling.attention_factor = 1.5f;
  const RopeFrequencies g = rope_frequencies(m);
  EXPECT_EQ(g.ramp_high, 1.0);
  EXPECT_EQ(g.attention, 1.5f);
}

TEST(RopeFrequencies, TheOpTurnsByThemAndItsBackwardIsTheTranspose) {
  const int B = 1, T = 9, H = 2, Hkv = 1, D = 16, pos0 = 20;
  const int row = (H + 2 * Hkv) * D;
  for (RopeScaling kind : {RopeScaling::llama3, RopeScaling::yarn}) {
    const RopeFrequencies f = rope_frequencies(model_with(kind));
    const std::vector<float> x = test::randn(B * T * row, 31);
    std::vector<float> y = x;
    rope_apply(Stream::cpu(), Tensor(y.data(), {B, T, row}), H, Hkv, f, RopeDirection::forward, pos0);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H + Hkv; ++h)
        for (int j = 0; j < D / 2; ++j) {
          const size_t at = static_cast<size_t>(t) * row + static_cast<size_t>(h) * D + j;
          const double a = (pos0 + t) * rope_inv_freq(f, j, D), m = f.attention;
          ASSERT_NEAR(y[at], m * (x[at] * std::cos(a) - x[at + D / 2] * std::sin(a)), 2e-5) << t << " " << j;
          ASSERT_NEAR(y[at + D / 2], m * (x[at + D / 2] * std::cos(a) + x[at] * std::sin(a)), 2e-5);
        }
    rope_apply(Stream::cpu(), Tensor(y.data(), {B, T, row}), H, Hkv, f, RopeDirection::backward, pos0);
    const double m2 = static_cast<double>(f.attention) * f.attention;
    for (size_t i = 0; i < x.size(); ++i) {
      const bool v = i % row >= static_cast<size_t>(H + Hkv) * D;  // v heads are never touched
      ASSERT_NEAR(y[i], v ? x[i] : m2 * x[i], 2e-5) << i;
    }
  }
}

}  // namespace
}  // namespace megatrain
