// AdamW with bf16 moments (optimizer.state_dtype = "bf16"; kernels/cpu/adamw.cpp [Note: 16-bit
// moments]) against AdamW with float32 moments started from the same widened moments each step:
// the parameters (and their fused 16-bit copy) must come out bitwise equal — the arithmetic is
// float32's — and the stored moments must be float32's new moments rounded to nearest even, by a
// rounding written here (the two bf16 neighbours, the nearer, ties to the even one), not the
// kernel's bit trick. Then the host view of the moments (optim/host_moments.h): a widening, and
// what a load writes into it rounded back on written(); and the moments' bytes halve.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/half.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/host_moments.h"
#include "tests/kernels/op_harness.h"
#include "tests/optim/mixed_layout.h"

namespace megatrain {
namespace {

using test::mixed_layout;

// Round to nearest bf16, ties to even: of the two bf16 values around f (its top 16 bits, and the
// next one away from zero), the nearer.
uint16_t nearest_bf16(float f) {
  const uint32_t toward_zero = std::bit_cast<uint32_t>(f) & 0xFFFF0000u, away = toward_zero + 0x10000u;
  const double d0 = std::fabs(static_cast<double>(f) - std::bit_cast<float>(toward_zero)),
               d1 = std::fabs(static_cast<double>(std::bit_cast<float>(away)) - f);
  const uint32_t pick = d0 < d1 ? toward_zero : d1 < d0 ? away : ((toward_zero >> 16) & 1u) ? away : toward_zero;
  return static_cast<uint16_t>(pick >> 16);
}

std::vector<float> widened(const Tensor& bf16, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = bf16_to_float(bf16.half()[i]);
  return out;
}

class Bf16Moments : public ::testing::TestWithParam<bool> {};  // with the fused bf16 parameter copy

TEST_P(Bf16Moments, StepsAreFloat32StepsWithTheMomentsRounded) {
  const bool copy = GetParam();
  const ParamLayout layout = mixed_layout();
  const int64_t n = layout.total();
  AdamWOptions o;
  o.weight_decay = 0.3f;
  o.grad_clip = 0.5f;
  AdamW f32(layout, o);
  o.state_dtype = Precision::bf16;
  AdamW b16(layout, o);
  std::vector<float> p = test::randn(static_cast<size_t>(n), 50);
  std::vector<float> q = p;
  std::vector<uint16_t> p16(static_cast<size_t>(n)), q16(static_cast<size_t>(n));
  for (int step = 1; step <= 4; ++step) {
    // Float32 moments start where the bf16 ones are.
    const std::vector<float> m = widened(b16.moment1(), n), v = widened(b16.moment2(), n);
    std::memcpy(f32.exp_avg(), m.data(), m.size() * sizeof(float));
    std::memcpy(f32.exp_avg_sq(), v.data(), v.size() * sizeof(float));
    std::vector<float> g =
        test::randn(static_cast<size_t>(n), 60 + static_cast<uint32_t>(step), step == 2 ? 0.01f : 1.0f);
    const double norm = grad_norm(Stream::cpu(), {GradPart(g.data(), n)});
    const float lr = 0.01f * static_cast<float>(step);
    const auto half = [&](std::vector<uint16_t>& h) {
      return copy ? Tensor(h.data(), Shape{n}, DType::bf16) : Tensor{};
    };
    f32.step(p.data(), g.data(), lr, norm, 1.0f, half(p16));
    b16.step(q.data(), g.data(), lr, norm, 1.0f, half(q16));
    ASSERT_EQ(std::memcmp(p.data(), q.data(), p.size() * sizeof(float)), 0) << "parameters after step " << step;
    ASSERT_EQ(p16, q16) << "16-bit parameter copy after step " << step;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b16.moment1().half()[i], nearest_bf16(f32.exp_avg()[i])) << "exp_avg " << i << " step " << step;
      ASSERT_EQ(b16.moment2().half()[i], nearest_bf16(f32.exp_avg_sq()[i])) << "exp_avg_sq " << i << " step " << step;
    }
  }
  EXPECT_EQ(b16.state_bytes() * 2, f32.state_bytes());
}

INSTANTIATE_TEST_SUITE_P(Copy, Bf16Moments, ::testing::Values(false, true));

// A checkpoint reads bf16 moments as their exact float32 widening and a load's float32 values are
// rounded to nearest even when written() — only while the view that was written is held.
TEST(Bf16HostMoments, ViewIsTheWideningAndWritesAreRoundedBack) {
  const ParamLayout layout = mixed_layout();
  const int64_t n = layout.total();
  AdamWOptions o;
  o.state_dtype = Precision::bf16;
  AdamW a(layout, o);
  for (int64_t i = 0; i < n; ++i) a.moment1().half()[i] = nearest_bf16(0.37f * static_cast<float>(i + 1));
  const std::unique_ptr<HostMoments> host = make_host_moments(a, n, Stream::cpu());
  {
    const HostMoments::View view = host->view();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(view.exp_avg[i], bf16_to_float(a.moment1().half()[i]));
    const float loaded = 1.0f + 3.0f / 256.0f;  // halfway between bf16's 1 + 1/128 and 1 + 2/128: to the even one
    for (int64_t i = 0; i < n; ++i) view.exp_avg[i] = loaded, view.exp_avg_sq[i] = -loaded;
    host->written();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(a.moment1().half()[i], nearest_bf16(loaded));
      ASSERT_EQ(a.moment2().half()[i], nearest_bf16(-loaded));
    }
    EXPECT_EQ(bf16_to_float(a.moment1().half()[0]), 1.0f + 2.0f / 128.0f);
  }
  a.moment1().half()[0] = 0;
  host->written();  // no view held: nothing written back
  EXPECT_EQ(a.moment1().half()[0], 0);
}

}  // namespace
}  // namespace megatrain
