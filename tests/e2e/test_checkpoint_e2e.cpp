// Checkpoints end to end: bitwise resume (sync and async save), crashes between the write, the
// commit and the pointer's update, keep_last, resumed metrics, a changed dropout, a two-rank async
// save read in one process. Damaged checkpoints: test_checkpoint_damage_e2e.cpp.
#include <cstring>

#include "tests/e2e/checkpoint_fixture.h"

namespace megatrain {
namespace {
using test::CheckpointE2E;
using test::metrics_field;
namespace fs = std::filesystem;

TEST_F(CheckpointE2E, ResumeIsBitwiseIdenticalToAnUninterruptedRun) {
  const std::string base = "--set train.steps=8 --set train.eval_interval=0 --set checkpoint.save_interval=4 ";
  const auto full = train(base + ckpt(dir_ / "a", ""), "a.jsonl");
  for (const char* async : {"false", "true"}) {
    const fs::path d = dir_ / (std::string("b_") + async);
    train("--set train.steps=4 --set train.eval_interval=0 --set checkpoint.save_interval=4 " +
              ckpt(d, std::string("--set checkpoint.async=") + async),
          "b1.jsonl");
    const auto resumed = train(base + ckpt(d, std::string("--set checkpoint.load=latest --set checkpoint.async=") + async),
                               "b2.jsonl");
    EXPECT_EQ(metrics_field(resumed, "loss", 0), metrics_field(full, "loss", 4)) << "async=" << async;
    EXPECT_EQ(metrics_field(resumed, "grad_norm", 0), metrics_field(full, "grad_norm", 4)) << "async=" << async;
    ASSERT_EQ(metrics_field(resumed, "loss", 0).size(), 4u);
    const auto a = state_of(dir_ / "a" / "step_0000008"), b = state_of(d / "step_0000008");
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "final parameters/optimizer differ";
  }
}

TEST_F(CheckpointE2E, CrashBetweenWriteAndRenameKeepsThePreviousCheckpoint) {
  const fs::path d = dir_ / "c";
  ASSERT_EQ(train_raw("--set train.steps=2 --set checkpoint.save_interval=2 " + ckpt(d, "")).code, 0);
  auto r = train_raw("--set train.steps=4 --set checkpoint.save_interval=2 " + ckpt(d, "--set checkpoint.load=latest"),
                     "env MEGATRAIN_FAULT=ckpt_crash:rank=0:step=4:phase=after_shard_before_commit ");
  EXPECT_EQ(r.code, 137) << r.output;  // SIGKILL
  EXPECT_TRUE(fs::exists(d / "step_0000004.tmp"));
  EXPECT_FALSE(fs::exists(d / "step_0000004"));
  EXPECT_EQ(latest_of(d), "step_0000002");
  r = train_raw("--set train.steps=3 " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + (d / "step_0000002").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("removed " + (d / "step_0000004.tmp").string()), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d / "step_0000004.tmp"));
}

// A crash after the folder's rename (the commit) and before `latest` is rewritten: the committed
// step 4 is newer than what `latest` names, and resuming takes it, saying the pointer is stale.
TEST_F(CheckpointE2E, CrashBeforeTheLatestPointerMovesResumesFromTheCommittedStep) {
  const fs::path d = dir_ / "stale";
  ASSERT_EQ(train_raw("--set train.steps=2 --set checkpoint.save_interval=2 " + ckpt(d, "")).code, 0);
  auto r = train_raw("--set train.steps=4 --set checkpoint.save_interval=2 " + ckpt(d, "--set checkpoint.load=latest"),
                     "env MEGATRAIN_FAULT=ckpt_crash:rank=0:step=4:phase=after_commit_before_latest ");
  EXPECT_EQ(r.code, 137) << r.output;
  EXPECT_EQ(latest_of(d), "step_0000002");
  ASSERT_TRUE(fs::exists(d / "step_0000004" / "model.h5"));
  r = train_raw("--set train.steps=5 " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("latest pointer stale (it names \"step_0000002\"), using step 4"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("resumed from " + (d / "step_0000004").string()), std::string::npos) << r.output;
}

TEST_F(CheckpointE2E, KeepLastRemovesOnlyOlderCompleteCheckpoints) {
  const fs::path d = dir_ / "k";
  ASSERT_EQ(train_raw("--set train.steps=4 --set checkpoint.save_interval=1 --set checkpoint.keep_last=2 " + ckpt(d, ""))
                .code,
            0);
  EXPECT_EQ(names_in(d), (std::vector<std::string>{"latest", "step_0000003", "step_0000004"}));
}

// Run 1 trains two steps past its last checkpoint; run 2 resumes from it into the same metrics file.
// The file must hold each step's rows once, in order: run 1's rows up to the checkpoint verbatim,
// then run 2's (whose losses equal run 1's redone steps: bitwise resume). A fresh start restarts it.
TEST_F(CheckpointE2E, ResumedRunsMetricsFileHoldsEveryStepOnceInOrder) {
  const fs::path d = dir_ / "m";
  const std::string eval = "--set train.eval_interval=2 --set train.eval_steps=1 ";
  const auto first = train("--set train.steps=6 --set checkpoint.save_interval=4 " + eval + ckpt(d, ""), "m.jsonl");
  const auto all = train("--set train.steps=8 " + eval + ckpt(d, "--set checkpoint.load=latest"), "m.jsonl");
  std::vector<std::pair<int64_t, bool>> rows, expected;  // (step, is validation)
  for (const auto& j : all) rows.emplace_back(j["step"].get<int64_t>(), j.contains("val_loss"));
  for (int64_t s = 1; s <= 8; ++s) {
    expected.emplace_back(s, false);
    if (s % 2 == 0) expected.emplace_back(s, true);
  }
  ASSERT_EQ(rows, expected);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(all[i], first[i]) << "row " << i << " of run 1 (steps <= 4) changed";
  const auto redone = metrics_field(all, "loss", 4), original = metrics_field(first, "loss", 4);
  ASSERT_EQ(original.size(), 2u);
  EXPECT_EQ(std::vector<double>(redone.begin(), redone.begin() + 2), original) << "run 2 redid steps 5-6 differently";
  EXPECT_EQ(train("--set train.steps=2 --set train.eval_interval=0 --set optimizer.decay_steps=60", "m.jsonl").size(), 2u) << "a fresh start appended";
}

// Settings that are not architecture may change when a checkpoint loads (config/model_compat.h):
// dropout 0.1 -> 0 trains and is logged; d_model is refused (DamagedCheckpoints…).
TEST_F(CheckpointE2E, LoadThatChangesDropoutTrains) {
  const fs::path d = dir_ / "drop";
  ASSERT_EQ(train_raw("--set train.steps=2 --set checkpoint.save_interval=2 " + ckpt(d, "")).code, 0);
  const auto r = train_raw("--set train.steps=4 --set model.dropout=0.0 " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("model.dropout: checkpoint has 'dropout = 0.1', config has 'dropout = 0.0'"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("step      4/4"), std::string::npos) << r.output;
}

// Two data-parallel ranks save asynchronously (collective MPI-IO from the writer threads); the
// checkpoint then loads in a single process (global tensors) and training continues with the same
// losses, to fp32 reduction-order tolerance.
TEST_F(CheckpointE2E, TwoRankAsyncCheckpointResumesInOneProcess) {
  const fs::path d = dir_ / "dp2";
  const std::string run = "--set train.steps=8 --set train.eval_interval=0 --set log.metrics_file=";
  auto r = test::run_shell(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 " +
      test::megatrain_bin() + " train --config " + config_.string() + " " + run + (dir_ / "two.jsonl").string() + " " +
      ckpt(d, "--set checkpoint.save_interval=4 --set checkpoint.async=true"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = train_raw(run + (dir_ / "one.jsonl").string() + " --set checkpoint.load='\"" + (d / "step_0000004").string() + "\"'",
                "env OMP_NUM_THREADS=1 ");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto two = metrics_field(dir_ / "two.jsonl", "loss", 4), one = metrics_field(dir_ / "one.jsonl", "loss", 4);
  ASSERT_EQ(two.size(), 4u);
  ASSERT_EQ(one.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(one[i], two[i], 1e-5 * std::fabs(two[i])) << "step " << 5 + i;
}

}  // namespace
}  // namespace megatrain
