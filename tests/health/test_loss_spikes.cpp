// Loss-spike detection (health/loss_spikes.h): nothing is judged before 10 losses; a loss at the
// factor times the window's median is a spike and stays out of the reference; the reference follows
// the last spike_window accepted losses; factor 0 turns it off.
#include <gtest/gtest.h>

#include "health/loss_spikes.h"

namespace megatrain {
namespace {

TEST(LossSpikes, ALossFarAboveTheMedianIsASpikeAndDoesNotMoveTheReference) {
  HealthOptions o;
  o.spike_factor = 10.0, o.spike_window = 20;
  LossSpikes s(o);
  for (int i = 0; i < 9; ++i) EXPECT_FALSE(s.check(i + 1, i == 3 ? 1e6 : 5.0, false)) << "judged before 10 losses";
  EXPECT_FALSE(s.check(10, 5.0, false));
  EXPECT_DOUBLE_EQ(s.reference(), 5.0);
  EXPECT_FALSE(s.check(11, 49.9, false));  // under 10 × 5
  EXPECT_TRUE(s.check(12, 60.0, false));
  EXPECT_TRUE(s.check(13, 60.0, false)) << "the spike stayed out of the reference";
  for (int i = 0; i < 40; ++i) s.check(14 + i, 2.0, false);  // the window moves on: reference 2
  EXPECT_DOUBLE_EQ(s.reference(), 2.0);
  EXPECT_TRUE(s.check(60, 25.0, false));
  o.spike_factor = 0.0;
  LossSpikes off(o);
  for (int i = 0; i < 20; ++i) off.check(i + 1, 1.0, false);
  EXPECT_FALSE(off.check(21, 1e9, false));
}

}  // namespace
}  // namespace megatrain
