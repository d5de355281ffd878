// UpdateGuard (trainer/update_guard.h), without a run: a loss spike's verdict under each
// health.on_spike (a rollback only with a checkpoint to roll back to), the skipped updates counted
// in the run state, and Inf/NaN steps — max_consecutive_skips in a row end the run with
// NonFiniteSteps naming the step and the first rank, a finite step between them starts the count
// again, and under fp16 the loss scaler backs off instead.
#include <gtest/gtest.h>

#include <string>

#include "tests/expect_contains.h"
#include "trainer/step_types.h"
#include "trainer/update_guard.h"

namespace megatrain {
namespace {

Config with_spikes(const std::string& on_spike) {
  Config c;
  c.health.spike_factor = 10.0;
  c.health.spike_window = 20;
  c.health.on_spike = on_spike;
  c.train.max_consecutive_skips = 3;
  return c;
}

// The verdict on a loss 50× the reference after 12 steps of loss 2.
Verdict spike_verdict(const Config& cfg, bool can_roll_back) {
  UpdateGuard g(cfg, false);
  for (int64_t s = 1; s <= 12; ++s) EXPECT_EQ(g.judge(s, 2.0, can_roll_back), Verdict::update) << s;
  return g.judge(13, 100.0, can_roll_back);
}

TEST(UpdateGuard, ASpikeIsWarnedSkippedOrRolledBackAsConfigured) {
  EXPECT_EQ(spike_verdict(with_spikes("warn"), true), Verdict::update);
  EXPECT_EQ(spike_verdict(with_spikes("skip"), true), Verdict::skip);
  EXPECT_EQ(spike_verdict(with_spikes("rollback"), true), Verdict::roll_back);
  EXPECT_EQ(spike_verdict(with_spikes("rollback"), false), Verdict::skip);  // nothing saved yet
  // Below the factor, or before the window holds 10 losses, nothing is a spike.
  UpdateGuard g(with_spikes("skip"), false);
  for (int64_t s = 1; s <= 5; ++s) EXPECT_EQ(g.judge(s, s == 5 ? 1000.0 : 2.0, true), Verdict::update);
  for (int64_t s = 6; s <= 15; ++s) EXPECT_EQ(g.judge(s, 2.0, true), Verdict::update);
  EXPECT_EQ(g.judge(16, 19.0, true), Verdict::update);
}

TEST(UpdateGuard, NonFiniteStepsInARowEndTheRunAndAFiniteOneStartsTheCountAgain) {
  const Config cfg = with_spikes("warn");
  UpdateGuard g(cfg, false);
  RunState at;
  const Overflow bad{2, "grad"}, fine{-1, ""};
  g.count(1, bad, false, 1.0, at);
  g.count(2, bad, false, 1.0, at);
  g.count(3, fine, true, 1.0, at);  // the count starts again
  g.count(4, bad, false, 1.0, at);
  g.count(5, bad, false, 1.0, at);
  EXPECT_EQ(at.skipped, 4);
  try {
    g.count(6, bad, false, 1.0, at);
    ADD_FAILURE() << "three non-finite steps in a row did not end the run";
  } catch (const NonFiniteSteps& e) {
    EXPECT_CONTAINS(e.what(), "3 steps in a row (to step 6) had Inf/NaN gradients (first seen on rank 2)");
    EXPECT_CONTAINS(e.what(), "raise train.max_consecutive_skips");
  }
  EXPECT_EQ(at.skipped, 5);
}

TEST(UpdateGuard, UnderFp16TheScalerBacksOffInsteadOfCounting) {
  Config cfg = with_spikes("warn");
  UpdateGuard g(cfg, false);
  RunState at;
  at.scaler.emplace(LossScaleOptions{});
  const double before = at.loss_scale();
  for (int64_t s = 1; s <= 5; ++s) g.count(s, Overflow{0, "grad"}, false, at.loss_scale(), at);
  EXPECT_LT(at.loss_scale(), before);
  EXPECT_EQ(at.skipped, 5);
}

}  // namespace
}  // namespace megatrain
