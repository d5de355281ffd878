// Mixture of Experts end to end: every (ep, tp, pp) layout with ep ∈ {1, 2, 4}, tp ∈ {1, 2},
// pp ∈ {1, 2} in at most 8 ranks trains a tiny two-block MoE (4 experts, top 2, aux and z losses,
// dropout on) like one process — loss and gradient norm of each of 10 steps, and the validations,
// within 1e-5 relative — for a softmax and a sigmoid router, dropless and with capacity (both drop
// policies), with shared experts and with residual MoE (both with the aux-free router bias), and a
// layout run twice is bitwise identical. One layout has ep < dp, so expert
// gradients are reduced over an expert-data-parallel group of 2; others run ZeRO 1 and 3, which
// shard the expert state over that group.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
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
};

class MoeE2E : public test::TrainE2E {
 protected:
  std::vector<json> run(const Layout& l, const std::string& variant, const std::string& name) {
    return train_mpi(l.tp * l.pp * l.dp,
                     fmt::format("{} {} --set train.steps=10 --set train.micro_batch_size=2 --set train.eval_interval=5 "
                                 "--set parallel.bucket_size_mb=0.05 --set parallel.tp={} --set parallel.pp={} "
                                 "--set parallel.ep={} --set parallel.zero_stage={}",
                                 kMoe, variant, l.tp, l.pp, l.ep, l.zero),
                     name);
  }
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
  const std::vector<Layout> layouts = {
      {1, 2, 1, 1, 0}, {1, 1, 2, 1, 0}, {1, 2, 2, 1, 0}, {2, 1, 1, 2, 0}, {2, 2, 1, 2, 1}, {2, 1, 2, 2, 0},
      {2, 2, 2, 2, 0}, {4, 1, 1, 4, 3}, {4, 2, 1, 4, 0}, {4, 1, 2, 4, 1}, {2, 1, 1, 4, 0}};
  for (size_t i = 0; i < layouts.size(); ++i)
    for (size_t v = 0; v < kVariants.size(); ++v) {
      const Layout& l = layouts[i];
      const std::string name = fmt::format("ep{}_tp{}_pp{}_dp{}_zero{}_v{}", l.ep, l.tp, l.pp, l.dp, l.zero, v);
      EXPECT_EQ(test::compare_runs(single[v], run(l, kVariants[v], name), 1e-5, name + " vs one process"), 10 * 2 + 2);
    }
  const Layout again{2, 2, 1, 2, 0};
  EXPECT_EQ(test::compare_runs(run(again, kVariants[1], "rerun_a"), run(again, kVariants[1], "rerun_b"), 0.0, "rerun"),
            22);
}

// The aux-free bias moves routing: a run with it differs after the first update from one whose
// rate is too small to change any choice (the same parameters, so step 1 is the same).
TEST_F(MoeE2E, AuxFreeBiasChangesRouting) {
  const Layout one{1, 1, 1, 1, 0};
  const auto with = run(one, "--set moe.aux_free_bias=0.01", "bias"), without = run(one, "--set moe.aux_free_bias=1e-30", "no_bias");
  ASSERT_EQ(with.size(), without.size());
  EXPECT_EQ(with[0]["loss"], without[0]["loss"]);
  EXPECT_NE(with[1]["moe"], without[1]["moe"]);
  EXPECT_NE(with.back()["val_loss"], without.back()["val_loss"]);
}

}  // namespace
}  // namespace megatrain
