// Damaged checkpoints end to end (docs/robustness.md R09): each kind of damage to the newest of two
// checkpoints — model.h5 truncated, a byte flipped, manifest.json deleted, `latest` garbage or
// naming a missing step — is refused with CKPT_INVALID naming the file and the reason, and
// checkpoint.load = "latest" resumes from the checkpoint before; every checkpoint damaged exits 66
// at once; an explicitly named damaged checkpoint exits 66, an incompatible one 64. The checkpoints
// are saved, and resumed with "latest", by 4 ranks (tp = dp = 2); named folders load in one process.
#include <chrono>
#include <fstream>

#include "tests/e2e/checkpoint_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {
using test::CheckpointE2E;
namespace fs = std::filesystem;

class CheckpointDamageE2E : public CheckpointE2E {
 protected:
  // DIR/step_0000002 and DIR/step_0000004 saved by 4 ranks (tp = dp = 2), `latest` naming the second.
  fs::path two_checkpoints(const std::string& name) {
    const fs::path d = dir_ / name;
    const auto r = train_mpi_raw(4, kLayout + "--set train.steps=4 --set checkpoint.save_interval=2 " + ckpt(d, ""));
    EXPECT_EQ(r.code, 0) << r.output;
    return d;
  }
  // The same 4 ranks resume with checkpoint.load = "latest".
  test::Result resume(const fs::path& d) {
    return train_mpi_raw(4, kLayout + "--set train.steps=5 " + ckpt(d, "--set checkpoint.load=latest"));
  }
  inline static const std::string kLayout = "--set parallel.tp=2 ";
  static void flip_byte_mid_file(const fs::path& file) {
    const auto at = static_cast<std::streamoff>(fs::file_size(file) / 2);
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(at);
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(at);
    f.write(&c, 1);
  }
  // The run resumed from step 2 after refusing step 4's FILE for REASON.
  static void expect_fallback(const test::Result& r, const fs::path& d, const fs::path& file, const std::string& reason) {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "CKPT_INVALID step=4 file=" + file.string() + " reason=" + reason);
    EXPECT_CONTAINS(r.output, "fell back to " + (d / "step_0000002").string());
    EXPECT_CONTAINS(r.output, "resumed from " + (d / "step_0000002").string() + " (step 2)");
  }
};

TEST_F(CheckpointDamageE2E, ATruncatedModelFileIsRefusedAndTheStepBeforeResumes) {
  const fs::path d = two_checkpoints("trunc"), file = d / "step_0000004" / "model.h5";
  fs::resize_file(file, fs::file_size(file) - 100);
  expect_fallback(resume(d), d, file, "size ");
}

TEST_F(CheckpointDamageE2E, AByteFlippedMidFileIsRefusedAndTheStepBeforeResumes) {
  const fs::path d = two_checkpoints("flip"), file = d / "step_0000004" / "model.h5";
  flip_byte_mid_file(file);
  expect_fallback(resume(d), d, file, "whole-file checksum (CRC-32)");
}

TEST_F(CheckpointDamageE2E, AMissingManifestIsRefusedAndTheStepBeforeResumes) {
  const fs::path d = two_checkpoints("nomanifest"), manifest = d / "step_0000004" / "manifest.json";
  fs::remove(manifest);
  expect_fallback(resume(d), d, manifest, "missing");
}

// `latest` is a pointer for people and tools: a damaged one is reported, and the newest committed
// checkpoint (step 4, the one before the step it should name) resumes.
TEST_F(CheckpointDamageE2E, GarbageInLatestIsReportedAndTheNewestCommittedStepResumes) {
  const fs::path d = two_checkpoints("garbage");
  test::write_file(d / "latest", "\x01\xff garbage");
  const auto r = resume(d);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "CKPT_INVALID step=? file=" + (d / "latest").string() + " reason=it holds \"\\x01\\xff garbage\"");
  EXPECT_CONTAINS(r.output, "resumed from " + (d / "step_0000004").string() + " (step 4)");
}

TEST_F(CheckpointDamageE2E, LatestNamingAMissingStepIsReportedAndTheStepBeforeResumes) {
  const fs::path d = two_checkpoints("missing");
  test::write_file(d / "latest", "step_0000006\n");
  const auto r = resume(d);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "CKPT_INVALID step=? file=" + (d / "latest").string() +
                                " reason=it names step_0000006, which does not exist");
  EXPECT_CONTAINS(r.output, "resumed from " + (d / "step_0000004").string() + " (step 4)");
}

TEST_F(CheckpointDamageE2E, EveryCheckpointDamagedExits66AtOnceUnlessFreshStartAllowed) {
  const fs::path d = two_checkpoints("all");
  flip_byte_mid_file(d / "step_0000004" / "model.h5");
  fs::resize_file(d / "step_0000002" / "model.h5", 1000);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = resume(d);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_CONTAINS(r.output, "CKPT_INVALID step=4 file=" + (d / "step_0000004" / "model.h5").string());
  EXPECT_CONTAINS(r.output, "CKPT_INVALID step=2 file=" + (d / "step_0000002" / "model.h5").string() + " reason=size 1000");
  EXPECT_CONTAINS(r.output, "holds no valid checkpoint");
  EXPECT_LT(secs, 30.0) << "a refusal must not wait on anything (spec: < 5 s)";
  RecordProperty("all_damaged_exit_s", std::to_string(secs));
  std::printf("every checkpoint damaged: exit %d after %.2f s\n", r.code, secs);
  r = train_raw("--set train.steps=2 --allow-fresh-start " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "starting fresh (--allow-fresh-start)");
}

TEST_F(CheckpointDamageE2E, NothingSavedExits66UnlessFreshStartAllowed) {
  const fs::path d = dir_ / "empty";
  fs::create_directories(d);
  auto r = train_raw("--set train.steps=2 " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_CONTAINS(r.output, "--allow-fresh-start");
  r = train_raw("--set train.steps=2 --allow-fresh-start " + ckpt(d, "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 0) << r.output;
}

// checkpoint.load = PATH: that folder or nothing (66); a config it cannot take is the config's
// fault (64), with no fallback.
TEST_F(CheckpointDamageE2E, ANamedDamagedCheckpointExits66AndAnIncompatibleOne64) {
  const fs::path d = two_checkpoints("named"), newest = d / "step_0000004" / "model.h5";
  flip_byte_mid_file(newest);
  const auto load = [&](const fs::path& folder) { return "--set checkpoint.load='\"" + folder.string() + "\"'"; };
  auto r = train_raw("--set train.steps=5 " + load(d / "step_0000004"));
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_CONTAINS(r.output, "CKPT_INVALID step=4 file=" + newest.string() + " reason=whole-file checksum");
  fs::resize_file(d / "step_0000002" / "model.h5", 1000);
  r = train_raw("--set train.steps=5 " + load(d / "step_0000002"));
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_CONTAINS(r.output, "(truncated or replaced)");
  ASSERT_EQ(train_raw("--set train.steps=2 --set checkpoint.save_interval=2 " + ckpt(dir_ / "e", "")).code, 0);
  r = train_raw("--set model.d_model=32 " + ckpt(dir_ / "e", "--set checkpoint.load=latest"));
  EXPECT_EQ(r.code, 64) << r.output;  // the config is at fault: no fallback to an older checkpoint
  EXPECT_CONTAINS(r.output, "CKPT_INCOMPATIBLE");
  EXPECT_CONTAINS(r.output, "model.d_model");
  r = train_raw("--set model.d_model=32 " + load(dir_ / "e" / "step_0000002"));
  EXPECT_EQ(r.code, 64) << r.output;
  EXPECT_CONTAINS(r.output, "model.d_model");
}

// A folder named by path that has no manifest.json (written before manifests, or assembled by
// hand) loads on model.h5's own checksums, with a warning; `latest` never picks one.
TEST_F(CheckpointDamageE2E, ANamedFolderWithoutManifestLoadsOnItsOwnChecksums) {
  const fs::path d = two_checkpoints("legacy"), folder = d / "step_0000004";
  fs::remove(folder / "manifest.json");
  auto r = train_raw("--set train.steps=5 --set checkpoint.load='\"" + folder.string() + "\"'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "checkpoint " + folder.string() + ": no manifest.json; loading model.h5 on its own checksums");
  flip_byte_mid_file(folder / "model.h5");
  r = train_raw("--set train.steps=5 --set checkpoint.load='\"" + folder.string() + "\"'");
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_CONTAINS(r.output, "fails its checksum");
}

// `megatrain checkpoint verify` finds what loading refuses, and says which steps are fine.
TEST_F(CheckpointDamageE2E, VerifyNamesEachDamagedStepAndExits66) {
  const fs::path d = two_checkpoints("verify"), file = d / "step_0000004" / "model.h5";
  flip_byte_mid_file(file);
  auto r = test::run_megatrain("checkpoint verify " + d.string());
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_CONTAINS(r.output, "OK step=2 " + (d / "step_0000002").string());
  EXPECT_CONTAINS(r.output, "CKPT_INVALID step=4 file=" + file.string() + " reason=whole-file checksum");
  fs::remove(d / "step_0000002" / "manifest.json");
  r = test::run_megatrain("checkpoint verify " + (d / "step_0000002").string());
  EXPECT_EQ(r.code, 66) << r.output;
  EXPECT_CONTAINS(r.output, "CKPT_INVALID step=2 file=" + (d / "step_0000002" / "manifest.json").string() +
                                " reason=missing");
}

}  // namespace
}  // namespace megatrain
