// ZeRO++ end to end ([Note: ZeRO++] in optim/zero_plan.h): the tiny model on 4 data-parallel ranks
// for 30 steps, each switch alone and all three, against the exact run of the same ZeRO stage.
// hpZ alone gives the exact stage-3 run's losses bitwise; the quantized runs train (the mean of the
// last five losses within 2% of the exact run's, where the loss falls by far more than that), move
// fewer data-parallel bytes, and rerun bitwise. With all three, a run stopped after a checkpoint
// and resumed gives the uninterrupted run's losses bitwise (checkpoints hold the float32 masters;
// the quantized values are derived from them again). Combinations that are not built are refused
// naming the keys.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
using json = nlohmann::json;

double mean_loss(const std::vector<json>& rows, int64_t first, int64_t last) {
  double sum = 0.0;
  int n = 0;
  for (const json& j : rows)
    if (j.contains("loss") && j["step"].get<int64_t>() >= first && j["step"].get<int64_t>() <= last) {
      sum += j["loss"].get<double>();
      ++n;
    }
  return n > 0 ? sum / n : 0.0;
}

class ZeroPPE2E : public test::TrainE2E {
 protected:
  std::vector<json> run(int stage, const std::string& switches, const std::string& name) {
    return train_mpi(4,
                     "--set train.steps=30 --set train.eval_interval=0 --set model.dropout=0.0 "
                     "--set train.micro_batch_size=4 --set parallel.zero_stage=" + std::to_string(stage) + " " +
                         switches,
                     name);
  }
};

constexpr const char* kQw = "--set parallel.zero_quantized_weights=true ";
constexpr const char* kQg = "--set parallel.zero_quantized_gradients=true ";
constexpr const char* kHpz = "--set parallel.zero_hpz_partition_size=2 ";

TEST_F(ZeroPPE2E, EachSwitchTrainsCloseToTheExactRun) {
  struct Case {
    int stage;
    std::string switches, name;
  };
  const std::vector<Case> cases = {{1, kQw, "qwz1"},        {2, kQg, "qgz2"},
                                   {3, kQw, "qwz3"},        {3, kQg, "qgz3"},
                                   {3, std::string(kQw) + kQg + kHpz, "all3"}};
  std::map<int, std::vector<json>> exact;
  for (const int stage : {1, 2, 3}) exact[stage] = run(stage, "", "exact" + std::to_string(stage));
  const double drop = mean_loss(exact[3], 1, 5) - mean_loss(exact[3], 26, 30);
  ASSERT_GT(drop, 0.3);
  std::map<std::string, std::vector<json>> runs;
  for (const Case& c : cases) {
    const auto& a = runs[c.name] = run(c.stage, c.switches, c.name);
    ASSERT_EQ(a.size(), 30u) << c.name;
    const std::vector<json>& e = exact[c.stage];
    const double want = mean_loss(e, 26, 30), got = mean_loss(a, 26, 30);
    EXPECT_NEAR(got, want, 0.02 * want) << c.name;
    bool differs = false;
    for (size_t i = 1; i < a.size(); ++i) differs = differs || a[i]["loss"] != e[i]["loss"];
    EXPECT_TRUE(differs) << c.name << " gives the exact run's losses: not quantizing";
    EXPECT_LT(a[5]["comm_bytes"].get<double>(), 0.8 * e[5]["comm_bytes"].get<double>()) << c.name;
  }
  test::compare_runs(runs["all3"], run(3, std::string(kQw) + kQg + kHpz, "all3_again"), 0.0, "all three, rerun");
  const auto hpz = run(3, kHpz, "hpz3");
  test::compare_runs(hpz, exact[3], 0.0, "hpZ against plain stage 3");
  EXPECT_GT(hpz[5]["hpz_comm_bytes"].get<double>(), 0.0);
  EXPECT_EQ(exact[3][5]["hpz_comm_bytes"].get<double>(), 0.0);
}

TEST_F(ZeroPPE2E, ResumeIsBitwiseWithAllThree) {
  const std::string all = std::string(kQw) + kQg + kHpz + "--set train.steps=6 --set checkpoint.save_interval=100 " +
                          "--set checkpoint.dir='\"" + (dir_ / "ck").string() + "\"' ";
  const auto whole = run(3, std::string(kQw) + kQg + kHpz + "--set train.steps=6", "whole");
  const std::string cmd = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 4 "
                          "-x OMP_NUM_THREADS=1 " + test::megatrain_bin() + " train --config " + config_.string() +
                          " --set log.metrics_file=" + (dir_ / "parts.jsonl").string() +
                          " --set train.eval_interval=0 --set model.dropout=0.0 --set train.micro_batch_size=4 "
                          "--set parallel.zero_stage=3 " + all;
  const auto first = test::run_shell(cmd + "--set train.exit_after_steps=3");
  ASSERT_EQ(first.code, 10) << first.output;  // trainer/stop_request.h: stopped after a save
  const auto second = test::run_shell(cmd + "--set checkpoint.load='\"latest\"'");
  ASSERT_EQ(second.code, 0) << second.output;
  ASSERT_NE(second.output.find("step      4/6"), std::string::npos) << second.output;
  test::compare_runs(test::metrics_lines(dir_ / "parts.jsonl"), whole, 0.0, "resumed against uninterrupted");
}

TEST_F(ZeroPPE2E, CombinationsThatAreNotBuiltAreRefused) {
  const struct {
    std::string flags, says;
  } cases[] = {
      {"--set parallel.zero_quantized_weights=true", "parallel.zero_quantized_weights = true (qwZ)"},
      {"--set parallel.zero_stage=1 --set parallel.zero_quantized_weights=true --set train.precision=bf16",
       "set zero_stage ≥ 1 and precision = \"fp32\""},
      {"--set parallel.zero_quantized_gradients=true", "parallel.zero_quantized_gradients = true (qgZ)"},
      {"--set parallel.zero_stage=2 --set parallel.zero_hpz_partition_size=2",
       "parallel.zero_hpz_partition_size = 2 (hpZ)"},
      {"--set parallel.zero_stage=3 --set parallel.zero_hpz_partition_size=0", "parallel.zero_hpz_partition_size"},
      {"--set parallel.zero_quant_block=0", "parallel.zero_quant_block"},
  };
  for (const auto& c : cases) {
    const auto r = test::run_megatrain("train --config " + config_.string() + " " + c.flags);
    EXPECT_EQ(r.code, 64) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.flags << "\n" << r.output;
  }
  const auto r = test::run_megatrain("train --config " + config_.string() +
                                     " --set parallel.zero_stage=3 --set parallel.zero_hpz_partition_size=3");
  EXPECT_EQ(r.code, 64) << r.output;
  EXPECT_NE(r.output.find("must divide dp = 1"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace megatrain
