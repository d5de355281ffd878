// fp16 training end to end (the tiny config): the linear layers multiply fp16 roundings with the
// loss dynamically scaled (trainer/loss_scaler.h). An overflow injected at one step
// (MEGATRAIN_FAULT nan, health/fault_plan.h) skips exactly that step — the weights after it equal
// the weights before it, to the byte — and lowers the scale as specified; the scale is taken out of
// the gradient norm and of AdamW's update (3 steps' norms and Adam state within 1 % of fp32's); an
// overflow on rank 1 is reported as rank 1's; a scale that would fall below the minimum stops the
// run with the error; fp16 runs at (tp, pp) = (2, 2) like one process (tolerances of
// tests/e2e/test_precision_e2e.cpp, which also compares fp16 with fp32) and resumes bitwise, loss
// scaler included.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class Fp16E2E : public test::CheckpointE2E {
 protected:
  static constexpr const char* kFp16 =
      "--set train.eval_interval=0 --set model.dropout=0.0 --set train.precision=fp16 --set optimizer.decay_steps=40";
  // `megatrain train` with a NaN gradient on rank 0 at the steps `inject` ("A" or "A..B"; none when empty).
  test::Result run(const std::string& inject, const std::string& extra, const std::string& metrics) {
    const std::string env = inject.empty() ? "" : "env MEGATRAIN_FAULT=nan:rank=0:step=" + inject + " ";
    return test::run_shell(env + test::megatrain_bin() + " train --config " + config_.string() +
                           " --set log.metrics_file=" + (dir_ / metrics).string() + " " + kFp16 + " " + extra);
  }
};

TEST_F(Fp16E2E, AnInjectedOverflowSkipsExactlyThatStepAndBacksTheScaleOff) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string flags = "--set train.steps=7 --set loss_scale.hysteresis=1 --set checkpoint.save_interval=1 "
                            "--set checkpoint.dir=" + ckpt;
  const auto r = run("4", flags, "injected.jsonl");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "step 4 skipped: gradients overflowed (Inf/NaN, first seen on rank 0) at loss scale "
                            "65536; scale now 32768");
  const auto m = test::metrics_lines(dir_ / "injected.jsonl");
  ASSERT_EQ(m.size(), 7u);
  for (size_t i = 0; i < m.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i) + 1;
    EXPECT_EQ(m[i]["skipped_steps"], step < 4 ? 0 : 1) << "step " << step;
    EXPECT_EQ(m[i]["grad_norm"].is_null(), step == 4) << "step " << step;
    EXPECT_EQ(m[i]["loss_scale"], step <= 4 ? 65536.0 : 32768.0) << "step " << step;
    EXPECT_EQ(m[i]["precision"], "fp16");
  }
  // The weights after the skipped step are the weights before it; the next step changes them.
  const std::string s3 = exported_weights(ckpt + "/step_0000003"), s4 = exported_weights(ckpt + "/step_0000004");
  ASSERT_GT(s3.size(), 1000u);
  EXPECT_TRUE(s3 == s4) << "the skipped step 4 changed the weights";
  EXPECT_FALSE(s4 == exported_weights(ckpt + "/step_0000005")) << "step 5 did not update";
  // Before the overflow the run is the uninjected one, bit for bit.
  const auto clean = run("", "--set train.steps=3", "clean.jsonl");
  ASSERT_EQ(clean.code, 0) << clean.output;
  const auto c = test::metrics_lines(dir_ / "clean.jsonl");
  const std::vector<json> head(m.begin(), m.begin() + 3);
  EXPECT_EQ(test::compare_runs(c, head, 0.0, "injected run before step 4"), 3 * 2);
}

// The loss scale is taken out again wherever the gradients' size matters: the gradient norm (logged,
// and what clipping compares with optimizer.grad_clip) divides it out, and AdamW multiplies the
// gradients by 1 / scale before they enter its moments. The losses would hide either one missing
// (clipping and AdamW's normalisation cancel a constant factor, up to eps), so an fp16 run is held
// to an fp32 run of the same 3 steps: each step's loss and gradient norm, and in the checkpoint
// after step 3 the parameters and both Adam moments (relative L2 norm), within 1 %. The GEMMs round
// their operands to fp16 (2^-11 relative); here the norms differ by up to 3e-4 and the state by up
// to 8e-4 (second moments). A missing unscale is off by the scale, 65536 (its square in the second
// moments), or, missing from the norm alone, clips every step by that much more.
TEST_F(Fp16E2E, GradientNormAndAdamStateMatchFp32) {
  std::vector<float> state[2];
  std::vector<json> metrics[2];
  for (int i = 0; i < 2; ++i) {
    const std::string precision = i == 0 ? "fp32" : "fp16", ckpt = (dir_ / ("ckpt_" + precision)).string();
    const auto r = run("", "--set train.steps=3 --set checkpoint.save_interval=3 --set checkpoint.dir=" + ckpt +
                               " --set train.precision=" + precision, precision + ".jsonl");
    ASSERT_EQ(r.code, 0) << r.output;
    metrics[i] = test::metrics_lines(dir_ / (precision + ".jsonl"));
    ASSERT_EQ(metrics[i].size(), 3u);
    EXPECT_EQ(metrics[i][0]["precision"], precision);
    state[i] = state_of(fs::path(ckpt) / "step_0000003");
  }
  EXPECT_EQ(metrics[1][2]["skipped_steps"], 0);  // no overflow: every step updated
  EXPECT_EQ(test::compare_runs(metrics[0], metrics[1], 0.01, "fp16 against fp32"), 3 * 2);
  const size_t n = state[0].size() / 3;
  const char* names[3] = {"parameters", "first moments", "second moments"};
  for (size_t k = 0; k < 3; ++k) {
    double diff = 0.0, norm = 0.0;
    for (size_t j = k * n; j < (k + 1) * n; ++j) {
      diff += std::pow(static_cast<double>(state[1][j]) - state[0][j], 2);
      norm += std::pow(static_cast<double>(state[0][j]), 2);
    }
    EXPECT_LT(std::sqrt(diff / norm), 0.01) << names[k] << " of fp16 against fp32 after step 3";
  }
}

TEST_F(Fp16E2E, AnOverflowOnRankOneIsLoggedWithRankOne) {
  const std::string cmd = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 "
                          "-x OMP_NUM_THREADS=1 -x MEGATRAIN_FAULT=nan:rank=1:step=2 " + test::megatrain_bin() +
                          " train --config " + config_.string() + " --set log.metrics_file=" +
                          (dir_ / "dp2.jsonl").string() + " " + kFp16 +
                          " --set train.steps=3 --set parallel.zero_stage=1";
  const auto r = test::run_shell(cmd);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "step 2 skipped: gradients overflowed (Inf/NaN, first seen on rank 1) at loss scale 65536; "
                            "scale now 65536");  // hysteresis 2: the first overflow keeps the scale
  const auto m = test::metrics_lines(dir_ / "dp2.jsonl");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2]["skipped_steps"], 1);
}

TEST_F(Fp16E2E, AScaleCollapsingBelowTheMinimumStopsTheRun) {
  const auto r = run("2..3", "--set train.steps=5 --set loss_scale.initial_scale=4.0 --set loss_scale.min_scale=2.0",
                     "collapse.jsonl");
  EXPECT_EQ(r.code, 0) << r.output;
  // Step 2: hysteresis 2 keeps the scale; step 3 backs off to 2 (the minimum); a third overflow stops.
  EXPECT_CONTAINS(r.output, "step 3 skipped: gradients overflowed (Inf/NaN, first seen on rank 0) at loss scale 4; "
                            "scale now 2");
  const auto r2 = run("2..4", "--set train.steps=5 --set loss_scale.initial_scale=4.0 --set loss_scale.min_scale=2.0",
                      "collapse2.jsonl");
  EXPECT_NE(r2.code, 0) << r2.output;
  EXPECT_CONTAINS(r2.output, "fp16 loss scale collapsed");
  EXPECT_CONTAINS(r2.output, "at the minimum scale 2 (loss_scale.min_scale)");
  EXPECT_EQ(r2.output.find("step      5/5"), std::string::npos) << "the run went on after the collapse";
}

TEST_F(Fp16E2E, RunsOnTpAndPpLikeOneProcessAndResumesBitwiseWithItsLossScaler) {
  const auto r = run("", "--set train.steps=40", "fp16.jsonl");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto fp16 = test::metrics_lines(dir_ / "fp16.jsonl");
  ASSERT_EQ(fp16.size(), 40u);
  // (tp, pp, dp) = (2, 2, 1) against one process: the losses within the bf16 tests' tolerances.
  const std::string cmd = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 4 "
                          "-x OMP_NUM_THREADS=1 " + test::megatrain_bin() + " train --config " + config_.string() +
                          " --set log.metrics_file=" + (dir_ / "tp2pp2.jsonl").string() + " " + kFp16 +
                          " --set train.steps=40 --set parallel.tp=2 --set parallel.pp=2";
  const auto p = test::run_shell(cmd);
  ASSERT_EQ(p.code, 0) << p.output;
  const auto layout = test::metrics_lines(dir_ / "tp2pp2.jsonl");
  ASSERT_EQ(layout.size(), 40u);
  EXPECT_NEAR(layout[0]["loss"].get<double>(), fp16[0]["loss"].get<double>(), 1e-4 * fp16[0]["loss"].get<double>());
  for (size_t i = 0; i < layout.size(); ++i)
    EXPECT_NEAR(layout[i]["loss"].get<double>(), fp16[i]["loss"].get<double>(), 0.01 * fp16[i]["loss"].get<double>())
        << "fp16 tp 2 pp 2, step " << i + 1;

  // Saved after step 3 with one overflow behind it (step 2, hysteresis 1: the scale halved and one
  // update fewer for AdamW's bias correction and the LR schedule); resumed, steps 4–6 are equal.
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string flags = "--set train.steps=6 --set loss_scale.hysteresis=1 --set loss_scale.growth_interval=2";
  const auto saved = run("2", flags + " --set checkpoint.save_interval=3 --set checkpoint.dir=" + ckpt, "saved.jsonl");
  ASSERT_EQ(saved.code, 0) << saved.output;
  const auto resumed = run("2", flags + " --set checkpoint.load=" + ckpt + "/step_0000003", "resumed.jsonl");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto s = test::metrics_lines(dir_ / "saved.jsonl"), t = test::metrics_lines(dir_ / "resumed.jsonl");
  ASSERT_EQ(s.size(), 6u);
  const std::vector<json> tail(s.begin() + 3, s.end());
  EXPECT_EQ(test::compare_runs(tail, t, 0.0, "fp16 resumed"), 3 * 2);
  for (size_t i = 0; i < t.size() && i < tail.size(); ++i) {
    EXPECT_EQ(t[i]["loss_scale"], tail[i]["loss_scale"]) << "step " << i + 4;
    EXPECT_EQ(t[i]["skipped_steps"], tail[i]["skipped_steps"]) << "step " << i + 4;
    EXPECT_EQ(t[i]["lr"], tail[i]["lr"]) << "step " << i + 4;
  }
}

}  // namespace
}  // namespace megatrain
