// Failed and slow saves end to end (docs/robustness.md R22). A save that hits the file-size limit
// (RLIMIT_FSIZE, `ulimit -f`: EFBIG) — synchronous or in the background, on 1, 2 and 4 ranks — is
// reported by every rank as CKPT_SAVE_FAILED errno=EFBIG, leaves `latest` and the committed
// checkpoints as they were, and training goes on, or exits 75 under checkpoint.on_save_fail =
// "exit". Storage 3 s slower per save (MEGATRAIN_FAULT=ckpt_slow) stalls an asynchronous run's
// saves far less than that.
#include <cstdio>
#include <regex>

#include "tests/e2e/checkpoint_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;

class CheckpointSaveE2E : public test::CheckpointE2E {
 protected:
  // What follows runs under `ulimit -f 1024` (512 KiB in dash's 512-byte blocks, 1 MiB in bash's:
  // either way below the tiny model's 1.6 MB checkpoint, above everything else a run writes), with
  // Open MPI kept off the shared-memory files the limit would stop too (PMIx's data store, the
  // vader transport).
  static constexpr const char* kFileSizeLimit =
      "sh -c 'ulimit -f 1024 && exec \"$0\" \"$@\"' env PMIX_MCA_gds=hash OMPI_MCA_btl=self,tcp ";
  static constexpr const char* kRanksKeepOffSharedMemory = "-x PMIX_MCA_gds --mca btl self,tcp";
  // 4 ranks run tp = dp = 2 (the tiny config's global batch is two micro-batches).
  static std::string layout(int np) { return np == 4 ? "--set parallel.tp=2 " : ""; }
  // DIR/step_0000002 saved by `np` ranks, without a limit.
  fs::path saved_step_2(int np, const std::string& name) {
    const fs::path d = dir_ / name;
    const auto r = train_mpi_raw(np, layout(np) + "--set train.steps=2 --set checkpoint.save_interval=2 " + ckpt(d, ""));
    EXPECT_EQ(r.code, 0) << r.output;
    return d;
  }
  test::Result resume_under_limit(int np, const fs::path& d, const std::string& extra) {
    return train_mpi_raw(np, layout(np) + "--set train.steps=6 --set checkpoint.save_interval=2 " +
                                 ckpt(d, "--set checkpoint.load=latest " + extra),
                         kFileSizeLimit, kRanksKeepOffSharedMemory);
  }
};

class SaveFailure : public CheckpointSaveE2E, public ::testing::WithParamInterface<std::tuple<int, bool>> {};

TEST_P(SaveFailure, IsReportedByEveryRankAndLeavesTheCommittedCheckpointsAlone) {
  const auto [np, async] = GetParam();
  const fs::path d = saved_step_2(np, "f");
  const std::string model = bytes_of(d / "step_0000002" / "model.h5");
  const auto r = resume_under_limit(np, d, std::string("--set checkpoint.async=") + (async ? "true" : "false"));
  EXPECT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < np; ++rank)
    for (const char* step : {"4", "6"}) {
      const std::regex line("CKPT_SAVE_FAILED step=" + std::string(step) + R"( errno=EFBIG \(rank \d: .*File too large.*\) rank=)" +
                            std::to_string(rank) + ": .*training continues");
      EXPECT_TRUE(std::regex_search(r.output, line)) << "no CKPT_SAVE_FAILED of step " << step << " on rank " << rank
                                                     << ":\n" << r.output;
    }
  EXPECT_CONTAINS(r.output, "step      6/6");
  EXPECT_EQ(latest_of(d), "step_0000002");
  EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_0000002"}));
  EXPECT_TRUE(bytes_of(d / "step_0000002" / "model.h5") == model) << "the committed checkpoint changed";
  const auto v = test::run_megatrain("checkpoint verify " + d.string());
  EXPECT_EQ(v.code, 0) << v.output;
}

INSTANTIATE_TEST_SUITE_P(RanksAndMode, SaveFailure,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) ? "async" : "sync");
                         });

TEST_F(CheckpointSaveE2E, AFailedSaveExits75UnderOnSaveFailExit) {
  const fs::path d = saved_step_2(2, "exit");
  const auto r = resume_under_limit(2, d, "--set checkpoint.on_save_fail='\"exit\"'");
  EXPECT_EQ(r.code, 75) << r.output;
  for (const char* rank : {"0", "1"}) {
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::string(R"(CKPT_SAVE_FAILED step=4 errno=EFBIG .* rank=)") +
                                                       rank + ": .*exiting with code 75")))
        << r.output;
    EXPECT_CONTAINS(r.output, std::string("[rank ") + rank + " host");
  }
  EXPECT_EQ(r.output.find("step      5/6"), std::string::npos) << "trained on after the failed save:\n" << r.output;
  EXPECT_EQ(latest_of(d), "step_0000002");
  const auto bad = train_raw("--set train.steps=2 " + ckpt(d, "--set checkpoint.on_save_fail='\"abort\"'"));
  EXPECT_EQ(bad.code, 64) << bad.output;
  EXPECT_CONTAINS(bad.output, "checkpoint.on_save_fail = \"abort\" must be \"continue\"");
}

// Saves every 2 steps, each 3 s slower than the disk: the first save stalls training for its copy
// to host memory only, the saves while it is written are skipped (saves never overlap), and the
// last one waits for it and commits.
TEST_F(CheckpointSaveE2E, SlowStorageStallsAsyncSavesFarLessThanTheDelay) {
  const fs::path d = dir_ / "slow";
  const auto r = train_raw("--set train.steps=8 --set train.eval_interval=0 --set checkpoint.save_interval=2 " +
                               ckpt(d, "--set checkpoint.async=true"),
                           "env OMP_NUM_THREADS=1 MEGATRAIN_FAULT=ckpt_slow:ms=3000 ");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::regex saved(R"(checkpoint: step (\d+) saved to .*training stalled ([0-9.]+) ms .*stage 2 \(background write and commit\) ([0-9.]+) s)");
  int early = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), saved), end; it != end; ++it) {
    const int step = std::stoi((*it)[1]);
    const double stall_ms = std::stod((*it)[2]), stage2_s = std::stod((*it)[3]);
    std::printf("save of step %d: training stalled %.1f ms, stage 2 %.2f s\n", step, stall_ms, stage2_s);
    EXPECT_GE(stage2_s, 3.0) << "the delay was not in stage 2";
    if (step == 8) continue;  // the run's last save waits for the one in flight
    EXPECT_LT(stall_ms, 1000.0) << "step " << step << ": the save stalled training for a third of the delay or more";
    ++early;
  }
  EXPECT_GE(early, 1) << r.output;
  EXPECT_CONTAINS(r.output, "CKPT_SAVE_SKIPPED step=4 reason=the previous save is still being written");
  EXPECT_EQ(latest_of(d), "step_0000008");
}

}  // namespace
}  // namespace megatrain
