// optimizer.state_dtype = "bf16" (AdamW's moments kept in bf16: kernels/cpu/adamw.cpp [Note: 16-bit
// moments], optim/host_moments.h) through whole runs of the tiny model: a run resumed at step 5
// continues bitwise; dp 2 at ZeRO 1 and 3 and pp 2 train like one process with bf16 moments
// within 1e-5 relative; a checkpoint of float32 moments loads into bf16 ones and one of bf16
// moments into float32 ones, each load saying what it converts; the run's moments take half the
// bytes of float32 ones (the planner's figure: test_plan_e2e).
#include <gtest/gtest.h>

#include <string>

#include "tests/e2e/e2e_fixture.h"
#include "tests/e2e/metrics_reader.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {
using test::TrainE2E;

constexpr const char* kBf16 = "--set model.dropout=0 --set optimizer.state_dtype=bf16 ";

using OptimizerStatesE2E = TrainE2E;

TEST_F(OptimizerStatesE2E, ResumeWithBf16MomentsIsBitwise) {
  expect_bitwise_resume(std::string(kBf16) + "--set train.eval_interval=0 --set checkpoint.save_interval=5 ");
}

TEST_F(OptimizerStatesE2E, EveryLayoutTrainsLikeOneProcessWithBf16Moments) {
  const auto single = train_parity(1, kBf16, "single");
  ASSERT_EQ(single.size(), 12u);  // 10 steps + 2 validations
  for (const auto& [name, flags] :
       {std::pair{"dp2_zero1", "--set parallel.zero_stage=1"}, std::pair{"dp2_zero3", "--set parallel.zero_stage=3"},
        std::pair{"pp2", "--set parallel.pp=2"}}) {
    const auto parallel = train_parity(2, std::string(kBf16) + flags, name);
    EXPECT_EQ(test::compare_runs(single, parallel, 1e-5, std::string(name) + " vs one process"), 10 * 2 + 2);
  }
  const auto fp32 = train_parity(1, "--set model.dropout=0 ", "fp32_moments");
  const double a = single.front()["memory_bytes"]["optimizer"].get<double>(),
               b = fp32.front()["memory_bytes"]["optimizer"].get<double>();
  EXPECT_EQ(2 * a, b) << "bf16 moments take half the bytes";
}

TEST_F(OptimizerStatesE2E, CheckpointsLoadIntoEitherDtypeSayingWhatTheyConvert) {
  const auto save = [&](const std::string& dtype, const std::string& dir) {
    const auto r = test::run_megatrain(
        "train --config " + config_.string() + " --set model.dropout=0 --set train.steps=5 " +
        "--set train.eval_interval=0 --set optimizer.state_dtype=" + dtype +
        " --set checkpoint.save_interval=5 --set checkpoint.dir='\"" + (dir_ / dir).string() + "\"'");
    ASSERT_EQ(r.code, 0) << r.output;
  };
  const auto load = [&](const std::string& dtype, const std::string& dir) {
    const auto r =
        test::run_megatrain("train --config " + config_.string() + " --set model.dropout=0 --set train.steps=7 " +
                            "--set train.eval_interval=0 --set optimizer.state_dtype=" + dtype +
                            " --set checkpoint.save_interval=0 --set checkpoint.dir='\"" + (dir_ / dir).string() +
                            "\"' --set checkpoint.load=latest");
    EXPECT_EQ(r.code, 0) << r.output;
    return r.output;
  };
  save("fp32", "from_fp32");
  EXPECT_CONTAINS(load("bf16", "from_fp32"),
                  "AdamW's moments were kept in fp32, optimizer.state_dtype = \"bf16\" keeps "
                  "them in bf16: their float32 values are rounded to bf16 (nearest even)");
  save("bf16", "from_bf16");
  EXPECT_CONTAINS(load("fp32", "from_bf16"), "their bf16 values widen to float32 exactly");
}

}  // namespace
}  // namespace megatrain
