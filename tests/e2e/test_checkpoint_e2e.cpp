// Checkpoints end to end: bitwise resume (sync and async save), crash between write and rename,
// keep_last, damaged checkpoints refused, fallback to the newest valid one, exit codes 64 and 66.
#include <cstring>
#include <fstream>

#include "model/params.h"
#include "tests/e2e/e2e_fixture.h"
#include "checkpoint/checkpoint_file.h"

namespace megatrain {
namespace {
using test::metrics_field;
using test::run_megatrain;
using test::TrainE2E;
namespace fs = std::filesystem;

class CheckpointE2E : public TrainE2E {
 protected:
  // The LR schedule spans 60 steps whatever train.steps is, so short runs share one schedule.
  std::string ckpt(const fs::path& dir, const std::string& extra) {
    return "--set optimizer.decay_steps=60 --set checkpoint.dir='\"" + dir.string() + "\"' " + extra;
  }
  test::Result train_raw(const std::string& extra, const std::string& env = "") {
    return test::run_shell(env + test::megatrain_bin() + " train --config " + config_.string() +
                           " --set optimizer.decay_steps=60 " + extra);
  }
  // Parameters and Adam state of a saved checkpoint, read with the tiny config's layout.
  std::vector<float> state_of(const fs::path& step_dir) {
    ModelConfig m;
    m.n_layers = 2;
    m.d_model = 64;
    m.n_heads = 4;
    m.vocab_size = 257;
    m.max_seq_len = 64;
    m.dropout = 0.1f;
    layout_ = gpt_param_layout(m);
    const int64_t n = layout_.total();
    std::vector<float> all(static_cast<size_t>(3 * n));
    checkpoint_file_read((step_dir / "model.h5").string(),
                         checkpoint_tensors_full(layout_, all.data(), all.data() + n, all.data() + 2 * n, 0, 1));
    return all;
  }
  ParamLayout layout_;
};

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
  std::ifstream latest(d / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step_0000002");
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
  std::ifstream latest(d / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step_0000002");
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
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_0000003", "step_0000004"}));
}

TEST_F(CheckpointE2E, DamagedCheckpointsAreRefusedAndLatestFallsBack) {
  const fs::path d = dir_ / "d";
  ASSERT_EQ(train_raw("--set train.steps=4 --set checkpoint.save_interval=2 " + ckpt(d, "")).code, 0);
  const fs::path newest = d / "step_0000004" / "model.h5";
  const auto size = fs::file_size(newest);
  // Bad checksum: one flipped byte in the middle of the data.
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.write(&c, 1);
  }
  auto r = train_raw("--set train.steps=5 --set checkpoint.load='\"" + (d / "step_0000004").string() + "\"'");
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_NE(r.output.find(newest.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checksum"), std::string::npos) << r.output;
  // latest falls back to step 2 and says so.
  r = train_raw("--set train.steps=5 " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fell back to " + (d / "step_0000002").string()), std::string::npos) << r.output;
  // Truncated file.
  fs::resize_file(d / "step_0000002" / "model.h5", 1000);
  r = train_raw("--set train.steps=5 --set checkpoint.load='\"" + (d / "step_0000002").string() + "\"'");
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
  // A different architecture cannot be reconciled.
  ASSERT_EQ(train_raw("--set train.steps=2 --set checkpoint.save_interval=2 " + ckpt(dir_ / "e", "")).code, 0);
  r = train_raw("--set model.d_model=32 " + ckpt(dir_ / "e", "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 64) << r.output;  // the config is at fault: no fallback to an older checkpoint
  EXPECT_NE(r.output.find("CKPT_INCOMPATIBLE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.d_model"), std::string::npos) << r.output;
  r = train_raw("--set model.d_model=32 --set checkpoint.load='\"" + (dir_ / "e" / "step_0000002").string() + "\"'");
  EXPECT_EQ(r.code, 64) << r.output;
  EXPECT_NE(r.output.find("model.d_model"), std::string::npos) << r.output;
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

// Settings that are not architecture may change when a checkpoint loads (trainer/model_compat.h):
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

TEST_F(CheckpointE2E, NothingValidExits66UnlessFreshStartAllowed) {
  const fs::path d = dir_ / "empty";
  fs::create_directories(d);
  auto r = train_raw("--set train.steps=2 " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_NE(r.output.find("--allow-fresh-start"), std::string::npos) << r.output;
  r = train_raw("--set train.steps=2 --allow-fresh-start " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 0) << r.output;
}

}  // namespace
}  // namespace megatrain
