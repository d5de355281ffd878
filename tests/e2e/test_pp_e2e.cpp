// Pipeline parallelism end to end: every factorisation of 2, 4 and 8 ranks into (tp, pp, dp), with
// every schedule where pp > 1 (taking turns on the layouts of 8 ranks and the pp = 2 ones of 4), of
// an 8-block GPT-2 (tied embedding and head on the first and last stage, dropout on) and Llama
// (GQA, untied), with ZeRO 0–3, sequence parallelism, activation recompute and uneven stages taking
// turns, trains like one process: loss and gradient norm of each of 10 steps within 1e-5 relative;
// a layout run twice is bitwise identical. GPipe holds every micro-batch's activations on stage 0,
// 1F1B only pp of them, and the metrics show it. A checkpoint saved at (tp, pp) = (2, 2) resumes
// at pp = 1 and pp = 4, and one saved at (tp, pp, dp) = (2, 2, 2) at six other 3D layouts.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <tuple>
#include <vector>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

class PpE2E : public test::TrainE2E {
 protected:
  // tp·pp·dp ranks on the tiny config with 4 blocks for 10 steps: micro-batches of 4 from a global
  // batch of 16; validation after step 5 and 10.
  std::vector<json> run(int tp, int pp, int dp, const std::string& extra, const std::string& name,
                        const std::string& model = "--set model.n_layers=4") {
    return train_mpi(tp * pp * dp,
                     fmt::format("--set train.steps=10 --set train.micro_batch_size=4 --set train.eval_interval=5 "
                                 "--set parallel.bucket_size_mb=0.05 --set parallel.tp={} --set parallel.pp={} {} {}",
                                 tp, pp, model, extra),
                     name);
  }
  void parity_matrix(int world);
  // 8 blocks of 8 heads, so that tp and pp reach 8; micro-batches of 2, so that dp does.
  static constexpr const char* kMatrix =
      "--set model.n_layers=8 --set model.n_heads=8 --set train.micro_batch_size=2";
};

// Llama-style: RMSNorm, RoPE, SwiGLU, no biases, untied head, 2 key/value heads for 4 query heads.
constexpr const char* kLlama =
    "--set model.norm='\"rmsnorm\"' --set model.position='\"rope\"' --set model.activation='\"swiglu\"' "
    "--set model.bias=false --set model.tie_embeddings=false --set model.n_kv_heads=2";

// The parity matrix of one world size: every (tp, pp, dp) with tp·pp·dp = world; on each layout
// with pp > 1 every schedule at 2 ranks and at 4 ranks with pp = 4, and one schedule per layout on
// the other layouts of 4 ranks and at 8 ranks (the schedules in turn, so that each meets every
// world size; all of them on every layout took over a quarter of CI's time), else one case. The
// cases take turns over the model (tied GPT-2 with dropout, GQA Llama), ZeRO stages, sequence
// parallelism (where tp > 1), recompute (none, selective, full; not with zero-bubble) and even or
// uneven stages, so each of those meets every world size; the interleaved schedule runs 2 model
// chunks per rank. Each case's 10 steps equal the single process's within 1e-5; each layout's first
// case is run twice and must agree bitwise.
void PpE2E::parity_matrix(int world) {
  struct Case {
    int tp, pp, dp;
    std::string schedule;
  };
  std::vector<Case> cases;
  int turn = 0;  // 8 ranks: the schedules take turns over the layouts with pp > 1
  for (int tp = 1; tp <= world; tp *= 2)
    for (int pp = 1; tp * pp <= world; pp *= 2) {
      std::vector<std::string> schedules = {"1f1b", "gpipe", "zero_bubble", "interleaved"};
      if (pp == 1) schedules = {"1f1b"};
      if (pp == 8) schedules.pop_back();  // 2 chunks of 8 stages > 8 blocks
      // At 8 ranks, and at 4 ranks where pp = 2 (pp = 4 there and pp = 2 at 2 ranks run them all).
      if (pp > 1 && (world == 8 || (world == 4 && pp == 2)))
        schedules = {schedules[static_cast<size_t>(turn++) % schedules.size()]};
      for (const std::string& schedule : schedules) cases.push_back({tp, pp, world / (tp * pp), schedule});
    }
  const std::string family[2] = {"gpt2", "llama"};
  std::vector<json> single[2];
  for (int f = 0; f < 2; ++f) {
    single[f] = run(1, 1, 1, f == 1 ? kLlama : "", fmt::format("{}_single_{}", family[f], world), kMatrix);
    ASSERT_EQ(single[f].size(), 12u);  // 10 steps + 2 validations
  }
  int interleaved_seen = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int f = static_cast<int>(i % 2);
    // ZeRO 0–3 in turn (the interleaved cases on a count of their own, so that they meet every
    // stage); zero-bubble runs with 0 or 1 (the config refuses 2 and 3 with it).
    const int zero = c.schedule == "interleaved" ? interleaved_seen++ % 4
                                                 : static_cast<int>(i / 2 % 4) % (c.schedule == "zero_bubble" ? 2 : 4);
    const bool sp = c.tp > 1 && i / 3 % 2 == 0;
    const char* recompute = c.schedule == "zero_bubble" ? "none" : std::array{"none", "full", "selective"}[i % 3];
    // pp = 2 and 4 take turns between an even and an uneven split of the 8 blocks.
    const std::string uneven = c.pp == 2 ? "[3, 5]" : c.pp == 4 ? "[1, 3, 2, 2]" : "";
    const bool interleaved = c.schedule == "interleaved";  // 2 model chunks per rank
    const bool use_uneven = !uneven.empty() && i / 2 % 2 == 1 && !interleaved;
    const std::string name = fmt::format("{}_tp{}_pp{}_dp{}_zero{}_{}{}_recompute_{}{}", family[f], c.tp, c.pp, c.dp,
                                         zero, c.schedule, sp ? "_sp" : "", recompute, use_uneven ? "_uneven" : "");
    const std::string set = fmt::format(
        "{} --set parallel.zero_stage={} --set parallel.pipeline_schedule='\"{}\"' --set parallel.sequence_parallel={} "
        "--set train.recompute='\"{}\"' --set parallel.virtual_stages={} {}",
        f == 1 ? kLlama : "", zero, c.schedule, sp, recompute, interleaved ? 2 : 1,
        use_uneven ? "--set 'parallel.pipeline_layers=" + uneven + "'" : "");
    const auto a = run(c.tp, c.pp, c.dp, set, name, kMatrix);
    EXPECT_EQ(test::compare_runs(single[f], a, 1e-5, name + " vs one process"), 10 * 2 + 2);
    ASSERT_FALSE(a.empty()) << name;
    EXPECT_EQ(a[0]["pp_idle_ms"].size(), static_cast<size_t>(c.pp)) << name;  // every stage's idle time
    if (c.pp > 1) {
      EXPECT_GT(a[0]["pp_comm_ms"].get<double>(), 0.0) << name;
    }
    if (c.schedule == "1f1b") {
      EXPECT_EQ(test::compare_runs(a, run(c.tp, c.pp, c.dp, set, name + "_again", kMatrix), 0.0, name + " rerun"), 22);
    }
  }
}

TEST_F(PpE2E, EveryLayoutOfTwoRanksMatchesOneProcess) { parity_matrix(2); }
TEST_F(PpE2E, EveryLayoutOfFourRanksMatchesOneProcess) { parity_matrix(4); }
TEST_F(PpE2E, EveryLayoutOfEightRanksMatchesOneProcess) { parity_matrix(8); }

// Stage 0 of pp = 2 with 4 micro-batches per step: GPipe keeps 4 micro-batches of activations,
// 1F1B 2 — the accounting in the metrics shows twice the slots' bytes, never less.
TEST_F(PpE2E, OneFOneBHoldsFewerActivationsThanGpipe) {
  const auto activations = [&](const char* schedule) {
    const auto m = run(1, 2, 1, fmt::format("--set parallel.pipeline_schedule='\"{}\"'", schedule), schedule);
    EXPECT_FALSE(m.empty());
    return m.empty() ? 0.0 : m[0]["memory_bytes"]["activations"].get<double>();
  };
  const double gpipe = activations("gpipe"), one_f_one_b = activations("1f1b");
  EXPECT_GT(gpipe, 1.6 * one_f_one_b) << gpipe << " vs " << one_f_one_b;
}

// Saved at (tp, pp, dp) = (2, 2, 1) after step 3 of 6 — the tied embedding stored once, from the
// first stage; resumed at pp = 1 and at pp = 4 (tp = 1), steps 4–6 match the saving run within 1e-5.
TEST_F(PpE2E, CheckpointFromTp2Pp2ResumesAtOtherPipelineSizes) {
  const fs::path ckpt = dir_ / "ckpt";
  const auto saved = run(2, 2, 1,
                         "--set train.steps=6 --set checkpoint.save_interval=3 --set checkpoint.dir=" + ckpt.string(),
                         "saved");
  std::vector<json> tail;
  for (const json& j : saved)
    if (j["step"].get<int64_t>() > 3) tail.push_back(j);
  for (int pp : {1, 4}) {
    const auto resumed =
        run(1, pp, 1, "--set train.steps=6 --set checkpoint.load=" + (ckpt / "step_0000003").string(),
            "resumed_pp" + std::to_string(pp));
    EXPECT_EQ(test::compare_runs(tail, resumed, 1e-5, "tp2 pp2 -> pp" + std::to_string(pp)), 3 * 2 + 2);
  }
}

// Full 3D resharding: the Llama saved at (tp, pp, dp, zero) = (2, 2, 2, 1) on 8 ranks after step 3
// resumes at (1,1,1,0), (4,1,2,3), (1,2,4,1), (2,1,4,2), (1,4,2,0) and, interleaved with two
// model chunks per rank, (2,2,2,1), steps 4–6 within 1e-5.
TEST_F(PpE2E, CheckpointFrom3dLayoutResumesAtOtherLayouts) {
  const fs::path ckpt = dir_ / "ckpt3d";
  const auto saved = run(2, 2, 2,
                         std::string(kLlama) + " --set train.steps=6 --set parallel.zero_stage=1 "
                                               "--set checkpoint.save_interval=3 --set checkpoint.dir=" + ckpt.string(),
                         "saved3d");
  std::vector<json> tail;
  for (const json& j : saved)
    if (j["step"].get<int64_t>() > 3) tail.push_back(j);
  using Layout = std::tuple<int, int, int, int, const char*>;
  const char* interleaved = "--set parallel.pipeline_schedule=interleaved --set parallel.virtual_stages=2";
  for (const auto& [tp, pp, dp, stage, extra] :
       {Layout{1, 1, 1, 0, ""}, Layout{4, 1, 2, 3, ""}, Layout{1, 2, 4, 1, ""}, Layout{2, 1, 4, 2, ""},
        Layout{1, 4, 2, 0, ""}, Layout{2, 2, 2, 1, interleaved}}) {
    const std::string name = fmt::format("resumed_tp{}_pp{}_dp{}_zero{}{}", tp, pp, dp, stage, *extra ? "_interleaved" : "");
    const auto resumed = run(tp, pp, dp,
                             fmt::format("{} --set train.steps=6 --set parallel.zero_stage={} --set checkpoint.load={} {}",
                                         kLlama, stage, (ckpt / "step_0000003").string(), extra),
                             name);
    EXPECT_EQ(test::compare_runs(tail, resumed, 1e-5, "(2,2,2) zero 1 -> " + name), 3 * 2 + 2);
  }
}

}  // namespace
}  // namespace megatrain
