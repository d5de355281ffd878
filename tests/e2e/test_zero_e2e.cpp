// Data parallelism and ZeRO end to end: every (dp, zero_stage) layout trains like one process,
// reruns are bitwise identical, and a checkpoint written by one layout resumes in others.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

class ZeroE2E : public test::TrainE2E {
 protected:
  // `np` ranks (one thread each) on the tiny config: micro-batches of 4 from a global batch of 16,
  // so dp = 1, 2, 4 run 4, 2, 1 micro-batches per step; small buckets so there are several.
  std::vector<json> run(int np, const std::string& extra, const std::string& name) {
    return train_mpi(np,
                     "--set train.micro_batch_size=4 --set train.eval_interval=5 --set parallel.bucket_size_mb=0.05 " +
                         extra,
                     name);
  }
};

// Same global batch, same samples and dropout masks (keyed by global sample index): the loss and
// gradient norm of every one of 10 steps agree with the single process within 1e-5 relative (fp32
// reduction order), and each layout run twice is bitwise identical.
TEST_F(ZeroE2E, EveryDataParallelSizeAndStageMatchesOneProcessAndRerunsBitwise) {
  const auto single = run(1, "--set train.steps=10", "single");
  ASSERT_EQ(single.size(), 12u);  // 10 steps + 2 validations
  for (int dp : {1, 2, 4})
    for (int stage = 0; stage <= 3; ++stage) {
      const std::string set = "--set train.steps=10 --set parallel.zero_stage=" + std::to_string(stage);
      const std::string name = "dp" + std::to_string(dp) + "_zero" + std::to_string(stage);
      const auto a = run(dp, set, name + "a");
      const auto b = run(dp, set, name + "b");
      EXPECT_EQ(test::compare_runs(single, a, 1e-5, name + " vs one process"), 10 * 2 + 2);
      test::compare_runs(a, b, 0.0, name + " rerun");
      // The step lines carry the timers, the bytes moved and the memory per rank.
      for (const char* k : {"comm_ms", "exposed_comm_ms", "compute_ms", "comm_bytes", "memory_bytes"})
        EXPECT_TRUE(a[0].contains(k)) << k;
      EXPECT_EQ(a[0]["comm_bytes"].get<double>() > 0, dp > 1) << name;
      EXPECT_GE(a[0]["exposed_comm_ms"].get<double>(), 0.0) << name;
      EXPECT_LE(a[0]["exposed_comm_ms"].get<double>(), a[0]["step_time_ms"].get<double>()) << name;
    }
}

// Overlap changes when reductions are issued, never what they compute: the same reductions of the
// same buckets in the same order, so every loss, gradient norm and validation loss is bitwise equal.
TEST_F(ZeroE2E, OverlapOffGivesTheSameLosses) {
  for (int stage : {0, 2}) {
    const std::string set = "--set train.steps=6 --set parallel.zero_stage=" + std::to_string(stage);
    const auto on = run(2, set, "on");
    const auto off = run(2, set + " --set parallel.overlap_grad_reduce=false", "off");
    EXPECT_EQ(test::compare_runs(on, off, 0.0, "overlap off, stage " + std::to_string(stage)), 6 * 2 + 2);
  }
}

// A checkpoint saved at dp = 4 with ZeRO-1 (moments sharded four ways) holds global tensors: it
// resumes at dp = 2 with ZeRO-3 (parameters sharded too) and at dp = 1, and the following steps'
// losses match the uninterrupted dp = 4 run.
TEST_F(ZeroE2E, CheckpointFromDp4Zero1ResumesAtDp2Zero3AndDp1) {
  const fs::path ckpt = dir_ / "ckpt";
  const auto full = run(4,
                        "--set train.steps=6 --set parallel.zero_stage=1 --set checkpoint.save_interval=3 "
                        "--set checkpoint.dir=" + ckpt.string(),
                        "dp4");
  ASSERT_TRUE(fs::exists(ckpt / "step_0000003" / "model.h5"));
  std::vector<json> tail;
  for (const json& j : full)
    if (j["step"].get<int64_t>() > 3) tail.push_back(j);
  for (const auto& [np, stage] : {std::pair{2, 3}, std::pair{1, 0}}) {
    const auto resumed = run(np,
                             "--set train.steps=6 --set parallel.zero_stage=" + std::to_string(stage) +
                                 " --set checkpoint.load=" + (ckpt / "step_0000003").string(),
                             "resume" + std::to_string(np));
    EXPECT_EQ(test::compare_runs(tail, resumed, 1e-5, "dp4 zero1 -> dp" + std::to_string(np) + " zero" + std::to_string(stage)),
              3 * 2 + 2);  // steps 4–6, validations at 5 and 6
  }
}

// Resuming at the same data-parallel layout is bitwise, as in one process: the steps after the
// checkpoint repeat the uninterrupted run's losses, gradient norms and validation losses exactly.
TEST_F(ZeroE2E, ResumeAtTheSameDataParallelLayoutIsBitwise) {
  for (int stage : {1, 3}) {
    const fs::path ckpt = dir_ / ("same" + std::to_string(stage));
    const std::string set = "--set train.steps=6 --set parallel.zero_stage=" + std::to_string(stage) +
                            " --set checkpoint.dir=" + ckpt.string();
    const auto full = run(2, set + " --set checkpoint.save_interval=3", "full" + std::to_string(stage));
    std::vector<json> tail;
    for (const json& j : full)
      if (j["step"].get<int64_t>() > 3) tail.push_back(j);
    const auto resumed =
        run(2, set + " --set checkpoint.load=" + (ckpt / "step_0000003").string(), "resumed" + std::to_string(stage));
    EXPECT_EQ(test::compare_runs(tail, resumed, 0.0, "dp2 zero" + std::to_string(stage) + " resume"), 3 * 2 + 2);
  }
}

// Three ranks do not divide the parameter count, so every ZeRO shard is padded: still one process's
// training (global batch 12 = three micro-batches of 4, one per rank).
TEST_F(ZeroE2E, UnevenShardsAtThreeRanksMatchOneProcess) {
  const std::string set = "--set train.steps=6 --set train.global_batch_size=12";
  const auto single = run(1, set, "single12");
  for (int stage = 1; stage <= 3; ++stage) {
    const auto three = run(3, set + " --set parallel.zero_stage=" + std::to_string(stage), "dp3_" + std::to_string(stage));
    EXPECT_EQ(test::compare_runs(single, three, 1e-5, "dp3 zero" + std::to_string(stage) + " vs one process"), 6 * 2 + 2);
  }
}

}  // namespace
}  // namespace megatrain
