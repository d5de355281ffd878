// Mixture of Experts end to end: every (ep, tp, pp) layout with ep ∈ {1, 2, 4}, tp ∈ {1, 2},
// pp ∈ {1, 2} in at most 8 ranks trains a tiny two-block MoE (4 experts, top 2, aux and z losses,
// dropout on) like one process — loss and gradient norm of each of 10 steps, and the validations,
// within 1e-5 relative — for a softmax and a sigmoid router, dropless and with capacity (both drop
// policies), with shared experts and with residual MoE (both with the aux-free router bias; two of
// these six variants per layout, in turn), and a layout run twice is bitwise identical; ZeRO 0–3,
// each stage above 0 also where ep < dp, so that the expert state is sharded over an
// expert-data-parallel group of 2 (plain data parallelism, ep = 1, among them). A checkpoint saved
// at (ep, tp, dp) = (2, 2, 2) holds each expert tensor whole, experts along dimension 0 (as one
// process saves it), and resumes at other ep, tp, dp and pp; `megatrain generate` runs on an MoE
// checkpoint.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <regex>
#include <tuple>

#include "checkpoint/checkpoint_file.h"
#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kMoe =
    "--set moe.n_experts=4 --set moe.top_k=2 --set moe.d_ff_expert=64 --set moe.aux_loss_coef=0.01 "
    "--set moe.z_loss_coef=0.001";

// The router, capacity and dense-branch settings every layout is checked with.
constexpr std::array<const char*, 6> kVariants = {
    "--set moe.router='\"softmax\"'",
    "--set moe.router='\"softmax\"' --set moe.capacity_factor=1.0 --set moe.drop_policy='\"probs\"'",
    "--set moe.router='\"sigmoid\"'",
    "--set moe.router='\"sigmoid\"' --set moe.capacity_factor=1.25 --set moe.drop_policy='\"position\"'",
    "--set moe.n_shared_experts=1 --set moe.aux_free_bias=0.01",
    "--set moe.residual=true --set moe.router='\"sigmoid\"' --set moe.aux_free_bias=0.01",
};

struct Layout {
  int ep, tp, pp, dp, zero;
  bool sp = false;  // sequence parallelism (tp > 1)
};

class MoeE2E : public test::TrainE2E {
 protected:
  // 10 steps unless `extra` says otherwise.
  std::vector<json> run(const Layout& l, const std::string& variant, const std::string& name,
                        const std::string& extra = "--set train.steps=10") {
    return train_mpi(l.tp * l.pp * l.dp,
                     fmt::format("{} {} --set train.micro_batch_size=2 --set train.eval_interval=5 "
                                 "--set parallel.bucket_size_mb=0.05 --set parallel.tp={} --set parallel.pp={} "
                                 "--set parallel.ep={} --set parallel.zero_stage={} --set parallel.sequence_parallel={} {}",
                                 kMoe, variant, l.tp, l.pp, l.ep, l.zero, l.sp, extra),
                     name);
  }
};

// The cases: every (ep, tp, pp) with two variants each (v and v + 3, in turn: each variant meets 3
// or 4 layouts, with ep = 2 and ep = 4 among them), ZeRO 0–3 where dp > 1. Expert ZeRO shards over
// the expert-data-parallel group of dp / ep ranks, so the layouts with ep < dp carry stages 1–3:
// plain data parallelism (ep 1, dp 2) at ZeRO 0 and 2, (ep, dp) = (2, 4) at ZeRO 1 and 3 (the
// latter run twice, bitwise); ZeRO 2 meets ep = dp with sequence parallelism too.
struct MoeCase {
  Layout l;
  size_t variant;
  bool rerun = false;
};
const std::vector<MoeCase> kMoeCases = {
    {{1, 2, 1, 1, 0}, 0},       {{1, 2, 1, 1, 0}, 3},       {{1, 1, 2, 1, 0}, 1},       {{1, 1, 2, 1, 0}, 4},
    {{1, 2, 2, 1, 0}, 2},       {{1, 2, 2, 1, 0}, 5},       {{1, 1, 1, 2, 0}, 0},       {{1, 1, 1, 2, 2}, 3},
    {{2, 2, 1, 2, 1, true}, 1}, {{2, 2, 1, 2, 2, true}, 4}, {{2, 1, 2, 2, 0}, 2},       {{2, 1, 2, 2, 0}, 5},
    {{2, 2, 2, 2, 0}, 0},       {{2, 2, 2, 2, 0}, 3},       {{4, 1, 1, 4, 3}, 1},       {{4, 1, 1, 4, 3}, 4},
    {{4, 2, 1, 4, 0}, 2},       {{4, 2, 1, 4, 0}, 5},       {{4, 1, 2, 4, 1}, 0},       {{4, 1, 2, 4, 1}, 3},
    {{2, 1, 1, 4, 1}, 1},       {{2, 1, 1, 4, 3}, 4, true},
};

TEST_F(MoeE2E, EveryLayoutTrainsLikeOneProcess) {
  std::vector<std::vector<json>> single;
  for (size_t v = 0; v < kVariants.size(); ++v) {
    single.push_back(run({1, 1, 1, 1, 0}, kVariants[v], fmt::format("single_v{}", v)));
    ASSERT_EQ(single.back().size(), 12u);  // 10 steps + 2 validations
    for (const json& j : single.back())
      if (j.contains("loss")) {
        ASSERT_TRUE(j.contains("moe") && j["moe"].size() == 2u) << j.dump();
      }
  }
  for (const auto& [l, v, rerun] : kMoeCases) {
    const std::string name =
        fmt::format("ep{}_tp{}_pp{}_dp{}_zero{}_sp{}_v{}", l.ep, l.tp, l.pp, l.dp, l.zero, l.sp, v);
    const auto a = run(l, kVariants[v], name);
    EXPECT_EQ(test::compare_runs(single[v], a, 1e-5, name + " vs one process"), 10 * 2 + 2);
    if (rerun) {
      EXPECT_EQ(test::compare_runs(a, run(l, kVariants[v], name + "_again"), 0.0, name + " rerun"), 22);
    }
  }
}

// The aux-free bias moves routing: a run with it differs after the first update from one whose
// rate is too small to change any choice (the same parameters, so step 1 is the same).
TEST_F(MoeE2E, AuxFreeBiasChangesRouting) {
  const Layout one{1, 1, 1, 1, 0};
  const auto with = run(one, "--set moe.aux_free_bias=0.01", "bias");
  const auto without = run(one, "--set moe.aux_free_bias=1e-30", "no_bias");
  ASSERT_EQ(with.size(), without.size());
  EXPECT_EQ(with[0]["loss"], without[0]["loss"]);
  EXPECT_NE(with[1]["moe"], without[1]["moe"]);
  EXPECT_NE(with.back()["val_loss"], without.back()["val_loss"]);
}

// Each dataset of model.h5 with its shape, from `h5ls -r` (hdf5-tools, scripts/setup.sh):
// "/params/x" → "{4, 48, 64}".
std::map<std::string, std::string> dataset_shapes(const fs::path& file) {
  const auto r = test::run_shell("h5ls -r " + file.string());
  EXPECT_EQ(r.code, 0) << r.output;
  std::map<std::string, std::string> shapes;
  const std::regex line(R"((\S+)\s+Dataset\s+(\{[^}]*\}))");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it)
    shapes[(*it)[1]] = (*it)[2];
  return shapes;
}

// The whole model's parameters in a checkpoint, read in this process with the layout of one
// process (its tensors are the file's global tensors).
std::vector<float> params_of(const fs::path& step_dir, const ParamLayout& layout) {
  const int64_t n = layout.total();
  std::vector<float> all(static_cast<size_t>(3 * n));
  checkpoint_file_read((step_dir / "model.h5").string(),
                       checkpoint_tensors_full(layout, all.data(), all.data() + n, all.data() + 2 * n, 0, 1));
  all.resize(static_cast<size_t>(n));
  return all;
}

// Saved at (ep, tp, dp, zero) = (2, 2, 2, 1) after step 3 of 6, resumed at other ep, tp, dp and pp
// (one of them at (ep, dp, zero) = (1, 2, 2), the expert state sharded over an edp group of 2):
// steps 4–6 and the validations at 5 and 6 match the saving run within 1e-5 relative. The file holds
// every expert tensor once, whole — (E, rows, cols), experts along dimension 0 — with the values one
// process saves at the same step, within 1e-3 of the tensor's largest value (three Adam steps turn
// the layouts' rounding differences into up to ~4e-5 of it, in dense tensors too; an expert in the
// wrong place would be off by the values themselves), and `megatrain checkpoint verify` accepts it.
// Expert FC and projection get different shapes (d_ff_expert 48 ≠ d_model 64): a transposed one shows.
TEST_F(MoeE2E, CheckpointHoldsWholeExpertTensorsAndResumesAtOtherLayouts) {
  const std::string variant = std::string(kVariants[1]) + " --set moe.d_ff_expert=48";
  const fs::path ckpt = dir_ / "ckpt", single_ckpt = dir_ / "single_ckpt";
  const auto save = [&](const fs::path& d) {
    return fmt::format("--set train.steps=6 --set checkpoint.save_interval=3 --set checkpoint.dir={}", d.string());
  };
  const auto saved = run({2, 2, 1, 2, 1}, variant, "saved", save(ckpt));
  run({1, 1, 1, 1, 0}, variant, "single", save(single_ckpt));
  const fs::path step3 = ckpt / "step_0000003";
  std::vector<json> tail;
  for (const json& j : saved)
    if (j["step"].get<int64_t>() > 3) tail.push_back(j);
  for (const Layout& l : {Layout{1, 1, 1, 1, 0}, Layout{4, 1, 1, 4, 3}, Layout{1, 1, 1, 2, 2}, Layout{2, 1, 2, 2, 0}}) {
    const std::string name = fmt::format("resumed_ep{}_tp{}_pp{}_dp{}_zero{}", l.ep, l.tp, l.pp, l.dp, l.zero);
    const auto resumed = run(l, variant, name, "--set train.steps=6 --set checkpoint.load=" + step3.string());
    EXPECT_EQ(test::compare_runs(tail, resumed, 1e-5, name), 3 * 2 + 2);
  }

  const auto verify = test::run_megatrain("checkpoint verify " + ckpt.string());
  EXPECT_EQ(verify.code, 0) << verify.output;
  const auto shapes = dataset_shapes(step3 / "model.h5");
  const auto shape = [&](const std::string& name) { return shapes.count(name) ? shapes.at(name) : "missing"; };
  for (const char* kind : {"params", "exp_avg", "exp_avg_sq"})
    for (int layer : {0, 1}) {
      const std::string prefix = fmt::format("/{}/layers.{}.moe.experts.", kind, layer);
      EXPECT_EQ(shape(prefix + "fc.weight"), "{4, 48, 64}") << prefix;
      EXPECT_EQ(shape(prefix + "proj.weight"), "{4, 64, 48}") << prefix;
    }

  ModelConfig m;  // the fixture's tiny model with kMoe's experts
  m.n_layers = 2;
  m.d_model = 64;
  m.n_heads = 4;
  m.vocab_size = 257;
  m.max_seq_len = 64;
  m.moe.n_experts = 4;
  m.moe.d_ff_expert = 48;
  const ParamLayout layout = gpt_param_layout(m);
  const std::vector<float> got = params_of(step3, layout), want = params_of(single_ckpt / "step_0000003", layout);
  int experts = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    if (!layout.spec(i).expert) continue;
    ++experts;
    const int64_t at = layout.offset(i), n = layout.local_shape(i).numel();
    float size = 0.0f;
    for (int64_t e = 0; e < n; ++e) size = std::max(size, std::fabs(want[static_cast<size_t>(at + e)]));
    for (int64_t e = 0; e < n; ++e)
      ASSERT_NEAR(got[static_cast<size_t>(at + e)], want[static_cast<size_t>(at + e)], 1e-3f * size)
          << layout.spec(i).name << " element " << e;
  }
  EXPECT_EQ(experts, 4);
}

// `megatrain train` with an MoE config in one process, then `megatrain generate` on its
// checkpoint: greedy and seeded sampling each reproducible, output starting with the prompt.
TEST_F(MoeE2E, GenerateRunsOnAnMoeCheckpoint) {
  const fs::path ckpt = dir_ / "ckpt";
  train(fmt::format("{} {} --set train.steps=2 --set optimizer.warmup_steps=0 --set train.eval_interval=0 "
                    "--set checkpoint.save_interval=2 --set checkpoint.dir={}",
                    kMoe, kVariants[0], ckpt.string()),
        "metrics.jsonl");
  for (const std::string sampling : {"--temperature 0", "--temperature 0.8 --top-k 40 --seed 3"}) {
    const std::string cmd =
        "generate --checkpoint " + ckpt.string() + " --prompt 'The ' --max-new-tokens 30 " + sampling;
    const auto a = test::run_megatrain(cmd, 120), b = test::run_megatrain(cmd, 120);
    ASSERT_EQ(a.code, 0) << cmd << "\n" << a.output;
    EXPECT_EQ(a.output, b.output) << cmd;
    EXPECT_EQ(a.output.rfind("The ", 0), 0u) << a.output;
    EXPECT_NE(a.output.find("[generate: "), std::string::npos) << a.output;
  }
}

}  // namespace
}  // namespace megatrain
