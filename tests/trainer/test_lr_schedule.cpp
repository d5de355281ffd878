// The LR schedule against the formulas written in README ("Optimizer and learning rate"); against
// Megatron-Core's scheduler itself: tests/reference/lr_schedule_reference.py.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "trainer/lr_schedule.h"

namespace megatrain {
namespace {

TEST(LrSchedule, WarmupIsLinearFromZero) {
  const LrSchedule s{1e-3, 1e-4, 10, 100, DecayKind::cosine};
  EXPECT_DOUBLE_EQ(s.at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
}

TEST(LrSchedule, CosineDecaysToMinAndStays) {
  const LrSchedule s{1e-3, 1e-4, 10, 100, DecayKind::cosine};
  EXPECT_DOUBLE_EQ(s.at(55), 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(std::numbers::pi * 0.5)));
  EXPECT_NEAR(s.at(100), 1e-4, 1e-15);
  EXPECT_NEAR(s.at(150), 1e-4, 1e-15);
  for (int t = 11; t < 100; ++t) EXPECT_LT(s.at(t + 1), s.at(t));
}

TEST(LrSchedule, LinearAndConstant) {
  const LrSchedule lin{1e-3, 0.0, 0, 50, DecayKind::linear};
  EXPECT_DOUBLE_EQ(lin.at(25), 0.5e-3);
  EXPECT_DOUBLE_EQ(lin.at(50), 0.0);
  const LrSchedule con{1e-3, 1e-5, 4, 50, DecayKind::constant};
  EXPECT_DOUBLE_EQ(con.at(2), 0.5e-3);
  EXPECT_DOUBLE_EQ(con.at(40), 1e-3);
}

TEST(LrSchedule, WsdHoldsThenDecaysInItsShape) {
  // Warmup 4, decay steps 30, the last 8 of them the decay: lr_max through step 22.
  for (WsdShape shape : {WsdShape::linear, WsdShape::cosine, WsdShape::exponential, WsdShape::minus_sqrt}) {
    const LrSchedule s{1e-3, 1e-4, 4, 30, DecayKind::wsd, 8, shape};
    EXPECT_DOUBLE_EQ(s.at(2), 0.5e-3);
    EXPECT_DOUBLE_EQ(s.at(5), 1e-3);
    EXPECT_DOUBLE_EQ(s.at(22), 1e-3);
    EXPECT_LT(s.at(23), 1e-3);
    EXPECT_NEAR(s.at(30), 1e-4, 1e-15);
    EXPECT_NEAR(s.at(40), 1e-4, 1e-15);
  }
  const auto at_half = [](WsdShape shape) { return LrSchedule{1.0, 0.0, 0, 20, DecayKind::wsd, 10, shape}.at(15); };
  EXPECT_DOUBLE_EQ(at_half(WsdShape::linear), 0.5);
  EXPECT_NEAR(at_half(WsdShape::cosine), 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(at_half(WsdShape::exponential), 2.0 * std::sqrt(0.5) - 1.0);
  EXPECT_DOUBLE_EQ(at_half(WsdShape::minus_sqrt), 1.0 - std::sqrt(0.5));
}

}  // namespace
}  // namespace megatrain
