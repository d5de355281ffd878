// Non-finite gradients at fp32 (docs/robustness.md R16; trainer/train.h): a step whose gradients hold
// Inf/NaN on any rank (injected with MEGATRAIN_FAULT nan, health/fault_plan.h: every gradient, or
// one element of one bucket) is skipped on every rank — the weights after it equal those before it,
// byte for byte — and logged with the rank it came from; train.max_consecutive_skips such steps in
// a row stop the run with exit code 76. Loss spikes are skipped or rolled back (R17).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <utility>

#include "tests/e2e/e2e_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

class NonFiniteE2E : public test::TrainE2E {
 protected:
  // `fault`: a MEGATRAIN_FAULT value.
  test::Result run(int np, const std::string& fault, const std::string& extra) {
    return test::run_shell("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MEGATRAIN_FAULT='" + fault +
                           "' mpirun --oversubscribe -np " + std::to_string(np) + " -x OMP_NUM_THREADS=1 -x MEGATRAIN_FAULT " +
                           test::megatrain_bin() + " train --config " + config_.string() +
                           " --set train.eval_interval=0 --set model.dropout=0.0 --set optimizer.decay_steps=40 "
                           "--set log.metrics_file=" + (dir_ / "m.jsonl").string() + " " + extra);
  }
};

TEST_F(NonFiniteE2E, ANonFiniteGradientOnRankOneSkipsThatStepOnEveryRank) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const auto r = run(2, "nan:rank=1:step=4", "--set train.steps=6 --set parallel.zero_stage=1 --set checkpoint.save_interval=1 "
                               "--set checkpoint.dir=" + ckpt);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "NONFINITE step=4 origin_rank=1 where=grad skipped=1/5");
  const auto m = test::metrics_lines(dir_ / "m.jsonl");
  ASSERT_EQ(m.size(), 6u);
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i]["skipped_steps"], i + 1 < 4 ? 0 : 1) << "step " << i + 1;
    EXPECT_EQ(m[i]["grad_norm"].is_null(), i + 1 == 4) << "step " << i + 1;
  }
  const std::string s3 = exported_weights(ckpt + "/step_0000003");
  ASSERT_GT(s3.size(), 1000u);
  EXPECT_TRUE(s3 == exported_weights(ckpt + "/step_0000004")) << "the skipped step 4 changed the weights";
  EXPECT_FALSE(s3 == exported_weights(ckpt + "/step_0000005")) << "step 5 did not update";
}

// One NaN in one element of rank 1's gradients (MEGATRAIN_FAULT nan element=, at step 2 of 3) is
// found there, before the data-parallel reduction, and named with rank 1 — in turn in the first
// element (the last bucket reduced), the middle one (a bucket between) and the last (bucket 0, the
// tail of its range), at ZeRO 1, 2 and 3 (the accumulated gradients and the working buffers); the
// step is skipped and the next trains. A scan that missed it would leave the NaN to the reduced
// gradients: "where=reduced grad", named with the lowest rank holding them.
TEST_F(NonFiniteE2E, OneNanInTheFirstMiddleOrLastElementIsFoundBeforeTheReduction) {
  const std::regex injected(R"(FAULT_INJECTED kind=nan rank=1 step=2 where=grad element=\w+ flat=(\d+) bucket=(\d+)/(\d+))");
  for (const auto& [element, zero] : {std::pair{"first", 1}, std::pair{"middle", 2}, std::pair{"last", 3}}) {
    const auto r = run(2, std::string("nan:rank=1:step=2:element=") + element,
                       "--set train.steps=3 --set parallel.bucket_size_mb=0.05 --set parallel.zero_stage=" +
                           std::to_string(zero));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "NONFINITE step=2 origin_rank=1 where=grad skipped=1/5");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, injected)) << r.output;
    const int bucket = std::stoi(m[2]), buckets = std::stoi(m[3]);
    ASSERT_GE(buckets, 3) << r.output;
    const std::string e = element;
    if (e == "first") {
      EXPECT_EQ(bucket, buckets - 1);
    } else if (e == "last") {
      EXPECT_EQ(bucket, 0);
    } else {
      EXPECT_TRUE(bucket > 0 && bucket < buckets - 1) << "bucket " << bucket << " of " << buckets;
    }
    const auto metrics = test::metrics_lines(dir_ / "m.jsonl");
    ASSERT_EQ(metrics.size(), 3u) << e;
    EXPECT_EQ(metrics[1]["skipped_steps"], 1) << e;
    EXPECT_TRUE(metrics[1]["grad_norm"].is_null()) << e;
    EXPECT_FALSE(metrics[2]["grad_norm"].is_null()) << e;
  }
}

// A NaN loss on rank 1 alone is found there, before anything is reduced, and named as such.
TEST_F(NonFiniteE2E, ANonFiniteLossIsNamedWithItsRank) {
  const auto r = run(2, "nan:rank=1:step=3:where=loss", "--set train.steps=4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "NONFINITE step=3 origin_rank=1 where=loss skipped=1/5");
}

// docs/robustness.md R17: a loss 100 times its recent median at step 35 is a LOSS_SPIKE; with
// health.on_spike = "skip" its update is skipped on every rank (counted, no gradient norm), and the
// next step trains normally.
TEST_F(NonFiniteE2E, ALossSpikeIsLoggedAndItsUpdateSkipped) {
  const auto r = run(2, "spike:rank=*:step=35:factor=100", "--set train.steps=37 --set health.on_spike=skip");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "LOSS_SPIKE step=35 value=");
  EXPECT_CONTAINS(r.output, "policy=skip");
  const auto m = test::metrics_lines(dir_ / "m.jsonl");
  ASSERT_EQ(m.size(), 37u);
  EXPECT_EQ(m[33]["skipped_steps"], 0);
  EXPECT_EQ(m[34]["skipped_steps"], 1);
  EXPECT_TRUE(m[34]["grad_norm"].is_null());
  EXPECT_FALSE(m[35]["grad_norm"].is_null());
  EXPECT_EQ(r.output.find("LOSS_SPIKE step=36"), std::string::npos) << r.output;
}

// docs/robustness.md R17 with health.on_spike = "rollback" (PaLM's recipe), 4 ranks (tp = dp = 2),
// saves every 10:
// the spike at step 35 (injected on global batch 35) sends every rank back to the checkpoint of step
// 30 and 20 batches past its data (batches 31..50 are never trained on again), so no second spike;
// the metrics file holds each step once; the checkpoints store the moved data position, and a run
// resumed from step 40 trains steps 41..50 on the same batches, bit for bit.
TEST_F(NonFiniteE2E, ALossSpikeRollsBackToTheLastCheckpointAndSkipsItsData) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string common = "--set parallel.tp=2 --set checkpoint.save_interval=10 --set checkpoint.dir=" + ckpt +
                             " --set health.on_spike=rollback --set health.spike_skip_batches=20";
  const auto r = run(4, "spike:rank=*:step=35:factor=100", "--set train.steps=50 " + common);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "LOSS_SPIKE step=35 value=");
  EXPECT_CONTAINS(r.output, "LOSS_SPIKE_ROLLBACK step=35 to_step=30 skipped_batches=31..50 rollback=1/3");
  size_t spikes = 0;
  for (size_t at = r.output.find("LOSS_SPIKE step="); at != std::string::npos; at = r.output.find("LOSS_SPIKE step=", at + 1))
    ++spikes;
  EXPECT_EQ(spikes, 1u) << r.output;
  const auto m = test::metrics_lines(dir_ / "m.jsonl");
  ASSERT_EQ(m.size(), 50u);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["step"], i + 1);
  // 16 samples per global batch: step 40 after skipping 20 batches has consumed 60 batches.
  const auto h5 = test::run_shell("h5dump -a consumed_samples " + ckpt + "/step_0000040/model.h5");
  EXPECT_CONTAINS(h5.output, "(0): 960");
  std::filesystem::rename(dir_ / "m.jsonl", dir_ / "rolled.jsonl");
  const auto resumed = run(4, "", "--set train.steps=50 " + common + " --set checkpoint.load='\"" + ckpt + "/step_0000040\"'");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto again = test::metrics_lines(dir_ / "m.jsonl");  // a new file: steps 41..50
  ASSERT_EQ(again.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(again[i]["loss"], m[40 + i]["loss"]) << "step " << 41 + i;
}

TEST_F(NonFiniteE2E, FiveInARowStopTheRunWithCode76) {
  const auto r = run(2, "nan:rank=0:step=7..14", "--set train.steps=20");
  EXPECT_EQ(r.code, 76) << r.output;
  EXPECT_CONTAINS(r.output, "NONFINITE step=11 origin_rank=0 where=grad skipped=5/5");
  EXPECT_CONTAINS(r.output, "5 steps in a row (to step 11) had Inf/NaN gradients");
  EXPECT_EQ(r.output.find("NONFINITE step=12"), std::string::npos) << r.output;
  const auto clean = run(1, "nan:rank=0:step=7;nan:rank=0:step=9;nan:rank=0:step=11;nan:rank=0:step=13",
                         "--set train.steps=14");  // never 5 in a row: runs to the end
  EXPECT_EQ(clean.code, 0) << clean.output;
  EXPECT_CONTAINS(clean.output, "NONFINITE step=13 origin_rank=0 where=grad skipped=1/5");
}

}  // namespace
}  // namespace megatrain
