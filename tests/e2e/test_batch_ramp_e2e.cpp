// train.rampup_batch_size through whole runs (data/batch_sizes.h): the tiny model's global batch
// ramps [4, 4, 40] to 16 over micro-batches of 2, so a step holds 2, 4, 6 then 8 micro-batches on
// one process (1 to 4 per rank at dp 2). Shown: the metrics' batch sizes, consumed samples and
// warmup learning rates equal Megatron's formulas worked by hand; dp 2 at ZeRO 1 and 3 and pp 2
// (1F1B and zero-bubble) train like one process within 1e-5 relative through the ramp; a run
// resumed at step 5, mid-ramp, continues bitwise; and its checkpoint resumed without the ramp is
// refused, naming the batch size.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/e2e/e2e_fixture.h"
#include "tests/e2e/metrics_reader.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {
using test::TrainE2E;

constexpr const char* kRamp =
    "--set model.dropout=0 --set train.micro_batch_size=2 --set train.rampup_batch_size=[4,4,40] ";

using BatchRampE2E = TrainE2E;

// Megatron's update(consumed): 4 while int(consumed / (40/3)) = 0 (consumed 0, 4, 8, 12), 8 at 16
// and 24, 12 at 32, then 16 past 40 samples. The warmup (5 steps) counts samples: step t ≤ 5 has
// lr = 3e-3 · consumed(t) / consumed(5), consumed(5) = 24.
TEST_F(BatchRampE2E, StepsFollowMegatronsRamp) {
  const auto m = train_parity(1, kRamp, "ramp");
  EXPECT_EQ(test::metrics_field(m, "global_batch_size"), (std::vector<double>{4, 4, 4, 4, 8, 8, 12, 16, 16, 16}));
  EXPECT_EQ(test::metrics_field(m, "consumed_samples"), (std::vector<double>{4, 8, 12, 16, 24, 32, 44, 60, 76, 92}));
  const std::vector<double> lr = test::metrics_field(m, "lr");
  ASSERT_EQ(lr.size(), 10u);
  const double consumed[] = {4, 8, 12, 16, 24};
  for (int t = 0; t < 5; ++t)
    EXPECT_NEAR(lr[static_cast<size_t>(t)], 3e-3 * consumed[t] / 24.0, 1e-9) << "step " << t + 1;
}

struct Layout {
  const char* name;
  int np;
  const char* flags;
};

const Layout kLayouts[] = {
    {"dp2_zero1", 2, "--set parallel.zero_stage=1"},
    {"dp2_zero3", 2, "--set parallel.zero_stage=3"},
    {"pp2_1f1b", 2, "--set parallel.pp=2"},
    {"pp2_zero_bubble", 2, "--set parallel.pp=2 --set parallel.pipeline_schedule=zero_bubble"},
};

TEST_F(BatchRampE2E, EveryLayoutRampsLikeOneProcess) {
  const auto single = train_parity(1, kRamp, "single");
  ASSERT_EQ(single.size(), 12u);  // 10 steps + 2 validations
  for (const Layout& l : kLayouts) {
    const auto parallel = train_parity(l.np, std::string(kRamp) + l.flags, l.name);
    EXPECT_EQ(test::compare_runs(single, parallel, 1e-5, std::string(l.name) + " vs one process"), 10 * 2 + 2);
    EXPECT_EQ(test::metrics_field(parallel, "global_batch_size"), test::metrics_field(single, "global_batch_size"));
  }
}

TEST_F(BatchRampE2E, ResumeMidRampIsBitwise) {
  const std::string flags = std::string(kRamp) + "--set train.eval_interval=0 --set checkpoint.save_interval=5 ";
  expect_bitwise_resume(flags);
  // The checkpoint of step 5 consumed 24 samples: no constant batch of 16 produces that.
  const auto r =
      test::run_megatrain("train --config " + config_.string() +
                          " --set model.dropout=0 --set train.micro_batch_size=2 --set train.steps=10 "
                          "--set checkpoint.dir='\"" +
                          (dir_ / "constant").string() + "\"' " + "--set checkpoint.load='\"" +
                          (dir_ / "resume_b" / "step_0000005").string() + "\"' --set checkpoint.save_interval=5");
  EXPECT_NE(r.code, 0);
  EXPECT_CONTAINS(r.output, "the checkpoint consumed 24 samples in 5 steps, which train.global_batch_size = 16");
}

}  // namespace
}  // namespace megatrain
