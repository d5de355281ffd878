// Bounded staleness end to end (parallel.max_staleness, optim/zero_plan.h [Note: bounded staleness],
// trainer/rank_run.h): max_staleness = 0 is synchronous training bitwise (losses, gradient
// norms, validation losses and the saved weights) on 2 and 4 ranks. At s = 1 and 2 the update of
// step k is built from batch k computed on the parameters of step k − s − 1, so the first s + 1
// steps' losses are those of the initial parameters (equal, bitwise, to a run whose learning rate
// is 0) and step s + 2's is not; the s in-flight gradient buffers are counted in comm_buffers (s
// times the gradient bytes); the replicas' parameters stay identical (the replica check passes);
// reruns are bitwise; a run resumed from a checkpoint continues the
// uninterrupted run bitwise (losses and final weights); and a config outside stage 0 is refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

class StalenessE2E : public test::TrainE2E {
 protected:
  // 8 steps of global batch 16 (micro-batches of 4), dropout off, checkpoints every 4 steps.
  std::vector<json> run(int np, const std::string& extra, const std::string& name) {
    return train_mpi(np,
                     "--set train.steps=8 --set train.micro_batch_size=4 --set train.eval_interval=4 "
                     "--set model.dropout=0.0 --set checkpoint.save_interval=4 --set checkpoint.dir=" +
                         (dir_ / name).string() + " " + extra,
                     name);
  }
  std::string weights(const std::string& name, int step) {
    return exported_weights((dir_ / name / fmt::format("step_{:07d}", step)).string());
  }
};

TEST_F(StalenessE2E, StalenessZeroIsSynchronousTrainingBitwise) {
  for (int np : {2, 4}) {
    const std::string sync = "sync" + std::to_string(np), s0 = "s0_" + std::to_string(np);
    const auto a = run(np, "", sync);
    const auto b = run(np, "--set parallel.max_staleness=0", s0);
    ASSERT_EQ(a.size(), 8u + 2u) << "8 steps and 2 validations at np " << np;
    EXPECT_EQ(test::compare_runs(a, b, 0.0, "s = 0 vs synchronous, np " + std::to_string(np)), 8 * 2 + 2);
    const std::string wa = weights(sync, 8), wb = weights(s0, 8);
    EXPECT_FALSE(wa.empty());
    EXPECT_TRUE(wa == wb) << "saved weights differ at np " << np;
  }
}

TEST_F(StalenessE2E, TheUpdateOfStepKComesFromParametersSPlusOneStepsOld) {
  const auto frozen = run(2, "--set optimizer.lr=0 --set optimizer.min_lr=0", "frozen");
  const auto sync = run(2, "", "sync");
  ASSERT_EQ(frozen.size(), 10u);
  for (int s : {1, 2}) {
    const std::string name = "s" + std::to_string(s);
    // The replica check (every 2 steps) ends the job if the replicas' parameters ever differ.
    const auto a =
        run(2, "--set health.replica_check_interval=2 --set parallel.max_staleness=" + std::to_string(s), name);
    ASSERT_EQ(a.size(), 10u) << name;
    // Rows: step 1..4, validation at 4, steps 5..8, validation at 8.
    for (int k = 0; k <= s; ++k)
      EXPECT_EQ(a[k]["loss"].get<double>(), frozen[k]["loss"].get<double>())
          << name << ": step " << k + 1 << " trains on the initial parameters";
    EXPECT_NE(a[s + 1]["loss"].get<double>(), frozen[s + 1]["loss"].get<double>())
        << name << ": step " << s + 2 << " sees the first update";
    EXPECT_NE(a[s + 1]["loss"].get<double>(), sync[s + 1]["loss"].get<double>()) << name << " is not synchronous";
    EXPECT_LT(a[8]["loss"].get<double>(), a[0]["loss"].get<double>()) << name << " trains";
    const int64_t grads = a[0]["memory_bytes"]["grads"].get<int64_t>();
    const auto buffers = [](const json& row) { return row["memory_bytes"]["comm_buffers"].get<int64_t>(); };
    EXPECT_EQ(buffers(a[0]) - buffers(sync[0]), s * grads)
        << name << ": the in-flight gradient buffers";
  }
}

TEST_F(StalenessE2E, StaleRunsRerunAndResumeBitwise) {
  for (int s : {1, 2}) {
    const std::string set = "--set parallel.max_staleness=" + std::to_string(s), name = "s" + std::to_string(s);
    const auto a = run(2, set, name + "a");
    const auto b = run(2, set, name + "b");
    EXPECT_EQ(test::compare_runs(a, b, 0.0, name + " rerun"), 8 * 2 + 2);
    EXPECT_TRUE(weights(name + "a", 8) == weights(name + "b", 8)) << name << " rerun weights";
    std::vector<json> tail;
    for (const json& j : a)
      if (j["step"].get<int64_t>() > 4) tail.push_back(j);
    const auto resumed =
        run(2, set + " --set checkpoint.load=" + (dir_ / (name + "a") / "step_0000004").string(), name + "r");
    EXPECT_EQ(test::compare_runs(tail, resumed, 0.0, name + " resume"), 4 * 2 + 1);
    EXPECT_TRUE(weights(name + "a", 8) == weights(name + "r", 8)) << name << " resumed weights";
  }
}

TEST_F(StalenessE2E, StalenessOutsideZeroStageZeroIsRefused) {
  const auto r = test::run_megatrain("train --config " + config_.string() +
                                     " --set parallel.zero_stage=1 --set parallel.max_staleness=2");
  EXPECT_EQ(r.code, 64) << r.output;
  EXPECT_NE(r.output.find("parallel.max_staleness = 2 is built for ZeRO stage 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zero_stage = 1"), std::string::npos) << r.output;
  const auto negative = test::run_megatrain("train --config " + config_.string() + " --set parallel.max_staleness=-1");
  EXPECT_EQ(negative.code, 64) << negative.output;
  EXPECT_NE(negative.output.find("parallel.max_staleness"), std::string::npos) << negative.output;
}

}  // namespace
}  // namespace megatrain
