// Pipeline parallelism end to end: every factorisation of 2, 4 and 8 ranks into (tp, pp, dp), with
// each schedule meeting every world size, of an 8-block GPT-2 (tied embedding and head on the first
// and last stage, dropout on) and Llama (GQA, untied), with ZeRO 0–3, sequence parallelism,
// activation recompute and uneven stages, trains like one process: loss and gradient norm of each
// of 10 steps within 1e-5 relative; every schedule has a case run twice, bitwise identical. ZeRO 1,
// 2 and 3, zero-bubble and interleaved each meet pp > 1 at dp > 1. GPipe holds every micro-batch's
// activations on stage 0, 1F1B only pp of them, and the metrics show it. A checkpoint saved at
// (tp, pp) = (2, 2) resumes at pp = 1 and pp = 4, and one saved at (tp, pp, dp) = (2, 2, 2) at six
// other 3D layouts.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
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
  struct Case;
  void parity_matrix(int world, const std::vector<Case>& cases);
  // 8 blocks of 8 heads, so that tp and pp reach 8; micro-batches of 2, so that dp does.
  static constexpr const char* kMatrix =
      "--set model.n_layers=8 --set model.n_heads=8 --set train.micro_batch_size=2";
};

// Llama-style: RMSNorm, RoPE, SwiGLU, no biases, untied head, 2 key/value heads for 4 query heads.
constexpr const char* kLlama =
    "--set model.norm='\"rmsnorm\"' --set model.position='\"rope\"' --set model.activation='\"swiglu\"' "
    "--set model.bias=false --set model.tie_embeddings=false --set model.n_kv_heads=2";

// One case of a parity matrix: the model family, a layout, the schedule (interleaved runs 2 model
// chunks per rank), the ZeRO stage, recompute (none with zero-bubble, whose weight steps read saved
// activations) and flags: sequence parallelism (tp > 1), an uneven split of the 8 blocks ([3, 5] at
// pp = 2, [1, 3, 2, 2] at pp = 4; not interleaved), a second run that must agree bitwise.
enum class Family { gpt2, llama };
constexpr unsigned kSp = 1, kUneven = 2, kRerun = 4;
struct PpE2E::Case {
  Family family;
  int tp, pp, dp;
  const char* schedule;
  int zero;
  const char* recompute;
  unsigned flags = 0;
};

// The parity matrix of one world size: `cases` hold every (tp, pp, dp) with tp·pp·dp = world (checked
// here), ZeRO above 0 only where dp > 1 (at dp = 1 a stage shards over one rank: stage 0 again).
// Each case's 10 steps equal the single process's within 1e-5.
void PpE2E::parity_matrix(int world, const std::vector<Case>& cases) {
  std::set<std::tuple<int, int, int>> want, got;
  for (int tp = 1; tp <= world; tp *= 2)
    for (int pp = 1; tp * pp <= world; pp *= 2) want.insert({tp, pp, world / (tp * pp)});
  for (const Case& c : cases) {
    got.insert({c.tp, c.pp, c.dp});
    ASSERT_EQ(c.tp * c.pp * c.dp, world);
    ASSERT_TRUE(c.zero == 0 || c.dp > 1) << "ZeRO " << c.zero << " at dp = 1";
  }
  ASSERT_EQ(got, want) << "the cases must hold every layout of " << world << " ranks";
  std::vector<json> single[2];
  for (int f = 0; f < 2; ++f) {
    single[f] = run(1, 1, 1, f == 1 ? kLlama : "", fmt::format("{}_single", f == 1 ? "llama" : "gpt2"), kMatrix);
    ASSERT_EQ(single[f].size(), 12u);  // 10 steps + 2 validations
  }
  for (const Case& c : cases) {
    const bool llama = c.family == Family::llama, sp = c.flags & kSp, uneven = c.flags & kUneven;
    const bool interleaved = std::string(c.schedule) == "interleaved";
    const std::string split = c.pp == 2 ? "[3, 5]" : "[1, 3, 2, 2]";
    const std::string name = fmt::format("{}_tp{}_pp{}_dp{}_zero{}_{}{}_recompute_{}{}", llama ? "llama" : "gpt2", c.tp,
                                         c.pp, c.dp, c.zero, c.schedule, sp ? "_sp" : "", c.recompute,
                                         uneven ? "_uneven" : "");
    const std::string set = fmt::format(
        "{} --set parallel.zero_stage={} --set parallel.pipeline_schedule='\"{}\"' --set parallel.sequence_parallel={} "
        "--set train.recompute='\"{}\"' --set parallel.virtual_stages={} {}",
        llama ? kLlama : "", c.zero, c.schedule, sp, c.recompute, interleaved ? 2 : 1,
        uneven ? "--set 'parallel.pipeline_layers=" + split + "'" : "");
    const auto a = run(c.tp, c.pp, c.dp, set, name, kMatrix);
    EXPECT_EQ(test::compare_runs(single[llama ? 1 : 0], a, 1e-5, name + " vs one process"), 10 * 2 + 2);
    ASSERT_FALSE(a.empty()) << name;
    EXPECT_EQ(a[0]["pp_idle_ms"].size(), static_cast<size_t>(c.pp)) << name;  // every stage's idle time
    if (c.pp > 1) {
      EXPECT_GT(a[0]["pp_comm_ms"].get<double>(), 0.0) << name;
    }
    if (c.flags & kRerun) {
      EXPECT_EQ(test::compare_runs(a, run(c.tp, c.pp, c.dp, set, name + "_again", kMatrix), 0.0, name + " rerun"), 22);
    }
  }
}

// The tables: 2 ranks run every schedule on pp = 2; 4 ranks every schedule on pp = 4 and
// zero-bubble with ZeRO 1 at (pp, dp) = (2, 2); 8 ranks one schedule per layout, two at
// (pp, dp) = (4, 2): 1F1B with ZeRO 2 and zero-bubble with ZeRO 1, interleaved with ZeRO 3 at
// (pp, dp) = (2, 4) and GPipe with ZeRO 3 at (tp, pp, dp) = (2, 2, 2). So ZeRO 1, 2 and 3,
// zero-bubble (which the config refuses with ZeRO 2 and 3) and interleaved meet pp > 1 at dp > 1.
// Bitwise reruns: GPipe at 2 ranks, zero-bubble at 4, interleaved and 1F1B at 8. (All schedules on
// every layout took over a quarter of CI's time.)
constexpr Family kG = Family::gpt2, kL = Family::llama;

TEST_F(PpE2E, EveryLayoutOfTwoRanksMatchesOneProcess) {
  parity_matrix(2, {{kG, 1, 1, 2, "1f1b", 2, "none"},
                    {kL, 1, 2, 1, "1f1b", 0, "full", kUneven},
                    {kG, 1, 2, 1, "gpipe", 0, "selective", kUneven | kRerun},
                    {kL, 1, 2, 1, "zero_bubble", 0, "none", kUneven},
                    {kG, 1, 2, 1, "interleaved", 0, "full"},
                    {kL, 2, 1, 1, "1f1b", 0, "selective"}});
}

TEST_F(PpE2E, EveryLayoutOfFourRanksMatchesOneProcess) {
  parity_matrix(4, {{kG, 1, 1, 4, "1f1b", 1, "none"},
                    {kL, 1, 2, 2, "zero_bubble", 1, "none", kUneven | kRerun},
                    {kG, 1, 4, 1, "1f1b", 0, "selective"},
                    {kL, 1, 4, 1, "gpipe", 0, "full", kUneven},
                    {kG, 1, 4, 1, "zero_bubble", 0, "none", kUneven},
                    {kL, 1, 4, 1, "interleaved", 0, "selective"},
                    {kG, 2, 1, 2, "1f1b", 3, "full", kSp},
                    {kL, 2, 2, 1, "gpipe", 0, "full", kSp | kUneven},
                    {kG, 4, 1, 1, "1f1b", 0, "selective", kSp}});
}

TEST_F(PpE2E, EveryLayoutOfEightRanksMatchesOneProcess) {
  parity_matrix(8, {{kG, 1, 1, 8, "1f1b", 2, "none"},
                    {kL, 1, 2, 4, "interleaved", 3, "full", kRerun},
                    {kG, 1, 4, 2, "1f1b", 2, "selective", kUneven | kRerun},
                    {kL, 1, 4, 2, "zero_bubble", 1, "none"},
                    {kL, 1, 8, 1, "gpipe", 0, "full"},
                    {kG, 2, 1, 4, "1f1b", 1, "selective"},
                    {kG, 2, 2, 2, "gpipe", 3, "selective", kSp | kUneven},
                    {kG, 2, 4, 1, "1f1b", 0, "full", kSp | kUneven},
                    {kL, 4, 1, 2, "1f1b", 3, "none", kSp},
                    {kG, 4, 2, 1, "gpipe", 0, "full", kSp},
                    {kL, 8, 1, 1, "1f1b", 0, "selective"}});
}

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
