// The learning-rate schedule's keys (config/config.h OptimizerConfig): WSD's final decay read with
// its shape, needed by decay = "wsd" and within the decay steps after warmup, refused elsewhere —
// each refusal naming the file and the key.
#include "tests/config/config_fixture.h"

namespace megatrain {
namespace {

using test::ConfigTest;

TEST_F(ConfigTest, WsdReadsItsDecayStepsAndShape) {
  Config c = load_config(write("[train]\nsteps = 100\n[optimizer]\nwarmup_steps = 10\ndecay = \"wsd\"\n"
                               "wsd_decay_steps = 20\nwsd_decay_style = \"minus_sqrt\"\n"),
                         {});
  resolve_config(c, 1);
  EXPECT_EQ(c.optimizer.decay, DecayKind::wsd);
  EXPECT_EQ(c.optimizer.wsd_decay_steps, 20);
  EXPECT_EQ(c.optimizer.wsd_decay_style, WsdShape::minus_sqrt);
  EXPECT_EQ(c.optimizer.decay_steps, 100);  // 0 = train.steps, so a longer run moves the decay
}

TEST_F(ConfigTest, WsdDecayStepsMustFitAndBelongToWsd) {
  const std::string wsd = "[train]\nsteps = 100\n[optimizer]\nwarmup_steps = 10\ndecay = \"wsd\"\n";
  EXPECT_CONTAINS(load_error(wsd, "optimizer.wsd_decay_steps"), "from 1 to the decay steps after warmup (100 − 10 = 90)");
  EXPECT_CONTAINS(load_error(wsd + "wsd_decay_steps = 91\n", "optimizer.wsd_decay_steps"), "it is 91");
  EXPECT_CONTAINS(load_error("[optimizer]\nwsd_decay_steps = 5\n", "optimizer.wsd_decay_steps"),
                  "read by optimizer.decay = \"wsd\" only");
  load_error(wsd + "wsd_decay_steps = 5\nwsd_decay_style = \"sqrt\"\n", "optimizer.wsd_decay_style");
}

}  // namespace
}  // namespace megatrain
