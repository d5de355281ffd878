// Blended, shuffled, split data end to end: two datasets blended 0.7 / 0.3 with data.split and
// data.shuffle; a run resumed from the step-4 checkpoint gives bitwise the losses (and validation
// losses) of an uninterrupted 8-step run; the sample-index cache is built and saved once, then
// loaded; validation comes from the split's valid part.
#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
using test::metrics_field;
using test::TrainE2E;
namespace fs = std::filesystem;

class DataE2E : public TrainE2E {
 protected:
  test::Result run(const std::string& extra, const std::string& metrics) {
    const std::string data = "--set 'data.train=[[0.7, \"" + (dir_ / "train").string() + "\"], [0.3, \"" +
                             (dir_ / "valid").string() + "\"]]' --set data.valid= --set data.split='\"90,5,5\"' " +
                             "--set data.shuffle=true --set data.cache_dir='\"" + (dir_ / "cache").string() + "\"' ";
    return test::run_megatrain("train --config " + config_.string() + " " + data +
                               "--set optimizer.decay_steps=60 --set train.eval_interval=4 --set log.metrics_file='\"" +
                               (dir_ / metrics).string() + "\"' " + extra);
  }
  std::string ckpt(const std::string& name) {
    return "--set checkpoint.save_interval=4 --set checkpoint.dir='\"" + (dir_ / name).string() + "\"' ";
  }
};

TEST_F(DataE2E, BlendedShuffledSplitResumeIsBitwiseIdentical) {
  auto full = run("--set train.steps=8 " + ckpt("a"), "full.jsonl");
  ASSERT_EQ(full.code, 0) << full.output;
  EXPECT_NE(full.output.find("data.train: sample index built"), std::string::npos) << full.output;
  EXPECT_NE(full.output.find("saved to cache " + (dir_ / "cache").string()), std::string::npos) << full.output;
  EXPECT_NE(full.output.find("valid part of data.split"), std::string::npos) << full.output;

  auto first = run("--set train.steps=4 " + ckpt("b"), "first.jsonl");
  ASSERT_EQ(first.code, 0) << first.output;
  auto resumed = run("--set train.steps=8 --set checkpoint.load=latest " + ckpt("b"), "resumed.jsonl");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  // The resumed run needs the same samples as the full run: its index comes from the cache.
  EXPECT_NE(resumed.output.find("data.train: sample index loaded from cache"), std::string::npos) << resumed.output;

  const auto want = metrics_field(dir_ / "full.jsonl", "loss", 4);
  const auto got = metrics_field(dir_ / "resumed.jsonl", "loss", 0);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(got, want);
  EXPECT_EQ(metrics_field(dir_ / "resumed.jsonl", "grad_norm", 0), metrics_field(dir_ / "full.jsonl", "grad_norm", 4));
  const auto val = metrics_field(dir_ / "full.jsonl", "val_loss", 4);
  ASSERT_EQ(val.size(), 1u);
  EXPECT_EQ(metrics_field(dir_ / "resumed.jsonl", "val_loss", 0), val);
  // An index built for 4 steps agrees with one built for 8 on the steps both cover.
  const auto head = metrics_field(dir_ / "full.jsonl", "loss", 0);
  ASSERT_EQ(head.size(), 8u);
  EXPECT_EQ(metrics_field(dir_ / "first.jsonl", "loss", 0), std::vector<double>(head.begin(), head.begin() + 4));
}

}  // namespace
}  // namespace megatrain
