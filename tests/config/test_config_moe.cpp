// The [moe] section (model/config.h MoeConfig) and expert parallelism in the run config: parsing
// of every key (both forms of moe.layers), defaults, the single- and cross-field rules, the options
// refused until they are built, parallel.ep's rules, and the resolved TOML round trip. Every error
// test checks that the message names the file and the key (config_fixture.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "tests/config/config_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

using test::ConfigTest;

// A valid MoE model of 4 blocks: 8 experts, 2 per token.
const std::string kMoe = "[moe]\nn_experts = 8\n";

TEST_F(ConfigTest, MoeDefaultsToADenseModel) {
  const MoeConfig e = load_config(write(""), {}).model.moe;
  EXPECT_FALSE(e.enabled());
  EXPECT_EQ(e.n_experts, 0);
  EXPECT_EQ(e.top_k, 2);
  EXPECT_EQ(e.every, 1);
  EXPECT_TRUE(e.layers.empty());
  EXPECT_EQ(e.d_ff_expert, 0);
  EXPECT_EQ(e.router, RouterKind::softmax);
  EXPECT_EQ(e.aux_loss_coef, 0.0f);
  EXPECT_EQ(e.z_loss_coef, 0.0f);
  EXPECT_EQ(e.aux_free_bias, 0.0f);
  EXPECT_EQ(e.capacity_factor, 0.0f);
  EXPECT_EQ(e.drop_policy, DropPolicy::probs);
  EXPECT_EQ(e.n_shared_experts, 0);
  EXPECT_FALSE(e.residual);
  // A stored config from before [moe] existed reads as dense too.
  EXPECT_FALSE(load_config_text("[model]\nn_layers = 2\n", "old").model.moe.enabled());
}

TEST_F(ConfigTest, MoeParsesEveryKey) {
  Config c = load_config(write(R"([model]
n_layers = 6
[moe]
n_experts = 16
top_k = 4
layers = [1, 3, 5]
d_ff_expert = 256
router = "sigmoid"
aux_loss_coef = 0.01
z_loss_coef = 1e-3
capacity_factor = 1.25
drop_policy = "position"
)"),
                         {});
  resolve_config(c, 1);
  const ModelConfig& m = c.model;
  EXPECT_EQ(m.moe.n_experts, 16);
  EXPECT_EQ(m.moe.top_k, 4);
  EXPECT_EQ(m.moe.layers, (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(m.moe.d_ff_expert, 256);
  EXPECT_EQ(m.expert_ffn_dim(), 256);
  EXPECT_EQ(m.moe.router, RouterKind::sigmoid);
  EXPECT_FLOAT_EQ(m.moe.aux_loss_coef, 0.01f);
  EXPECT_FLOAT_EQ(m.moe.z_loss_coef, 1e-3f);
  EXPECT_FLOAT_EQ(m.moe.capacity_factor, 1.25f);
  EXPECT_EQ(m.moe.drop_policy, DropPolicy::position);
  EXPECT_TRUE(m.moe.enabled());
  EXPECT_FALSE(m.moe.is_moe_layer(0));
  EXPECT_TRUE(m.moe.is_moe_layer(3));
  // The disabled options parse (and are refused by resolve_config, below).
  const MoeConfig off = load_config(write("[moe]\naux_free_bias = 0.001\nn_shared_experts = 2\nresidual = true\n"), {})
                            .model.moe;
  EXPECT_FLOAT_EQ(off.aux_free_bias, 0.001f);
  EXPECT_EQ(off.n_shared_experts, 2);
  EXPECT_TRUE(off.residual);
}

TEST_F(ConfigTest, MoeLayersIsAnIntervalOrAList) {
  Config c = load_config(write(kMoe + "layers = 2\n"), {});
  resolve_config(c, 1);
  EXPECT_EQ(c.model.moe.every, 2);
  EXPECT_TRUE(c.model.moe.layers.empty());
  EXPECT_TRUE(c.model.moe.is_moe_layer(0));
  EXPECT_FALSE(c.model.moe.is_moe_layer(1));
  EXPECT_TRUE(c.model.moe.is_moe_layer(2));
  EXPECT_EQ(load_config(write(kMoe), {"moe.layers=[0, 2]"}).model.moe.layers, (std::vector<int>{0, 2}));
  for (const char* bad : {"[]", "\"all\"", "1.5", "[1, \"a\"]", "[[1]]"})
    EXPECT_CONTAINS(load_error(kMoe + "layers = " + bad + "\n", "'moe.layers'"),
                    "must be an integer k (blocks 0, k, 2k, … are MoE blocks) or a non-empty array");
}

TEST_F(ConfigTest, MoeSingleFieldRules) {
  EXPECT_CONTAINS(load_error("[moe]\nn_experts = -1\n", "moe.n_experts"), "= -1 must be at least 0 (0 = a dense");
  load_error("[moe]\ntop_k = 0\n", "moe.top_k");
  EXPECT_CONTAINS(load_error("[moe]\nlayers = 0\n", "moe.layers"), "must be at least 1");
  load_error("[moe]\nd_ff_expert = -1\n", "moe.d_ff_expert");
  load_error("[moe]\naux_loss_coef = -0.1\n", "moe.aux_loss_coef");
  load_error("[moe]\nz_loss_coef = -1\n", "moe.z_loss_coef");
  load_error("[moe]\naux_free_bias = -1\n", "moe.aux_free_bias");
  load_error("[moe]\ncapacity_factor = -1.0\n", "moe.capacity_factor");
  load_error("[moe]\nn_shared_experts = -1\n", "moe.n_shared_experts");
  EXPECT_CONTAINS(load_error("[moe]\nrouter = \"topk\"\n", "'moe.router'"), "one of \"softmax\", \"sigmoid\"");
  EXPECT_CONTAINS(load_error("[moe]\ndrop_policy = \"random\"\n", "'moe.drop_policy'"),
                  "one of \"probs\", \"position\"");
  EXPECT_CONTAINS(load_error("[moe]\nn_expert = 8\n", "'moe.n_expert'"), "did you mean 'moe.n_experts'?");
}

TEST_F(ConfigTest, MoeCrossFieldRules) {
  EXPECT_CONTAINS(load_error(kMoe + "top_k = 9\n", "moe.top_k"),
                  "moe.top_k = 9 exceeds moe.n_experts = 8: each token goes to top_k different experts; lower top_k");
  EXPECT_CONTAINS(load_error(kMoe + "layers = [0, 4]\n", "moe.layers[1]"),
                  "= 4 is not a block of the model: block indices run from 0 to model.n_layers - 1 = 3");
  load_error(kMoe + "layers = [-1]\n", "moe.layers[0]");
  EXPECT_CONTAINS(load_error(kMoe + "layers = [2, 1]\n", "moe.layers"),
                  "strictly increasing order without repeats (moe.layers[1] = 1 follows 2); sort the list");
  load_error(kMoe + "layers = [1, 1]\n", "moe.layers");
  // A dense model ignores what [moe] says about experts it does not have.
  Config dense = load_config(write("[moe]\ntop_k = 5\nlayers = [7, 3]\n"), {});
  EXPECT_NO_THROW(resolve_config(dense, 1));
}

// Residual MoE and shared experts are both a dense branch beside the experts: one at a time.
TEST_F(ConfigTest, MoeTakesOneDenseBranch) {
  EXPECT_CONTAINS(load_error(kMoe + "residual = true\nn_shared_experts = 1\n", "moe.residual"),
                  "two kinds of dense branch beside the experts; keep one");
  for (const char* ok : {"residual = true\n", "n_shared_experts = 2\n", "aux_free_bias = 0.001\n"}) {
    Config c = load_config(write(kMoe + ok), {});
    EXPECT_NO_THROW(resolve_config(c, 1)) << ok;
  }
}

TEST_F(ConfigTest, TensorParallelSizeMustSplitEachExpert) {
  EXPECT_CONTAINS(load_error(kMoe + "d_ff_expert = 99\n[parallel]\ntp = 2\n", "moe.d_ff_expert", {}, 2),
                  "parallel.tp = 2 does not divide the expert MLP width 99");
  Config c = load_config(write(kMoe + "d_ff_expert = 96\n[parallel]\ntp = 2\n"), {});
  EXPECT_NO_THROW(resolve_config(c, 2));
}

TEST_F(ConfigTest, ExpertParallelRules) {
  EXPECT_CONTAINS(load_error("[parallel]\nep = 2\n", "parallel.ep", {}, 2),
                  "parallel.ep = 2 splits experts, but [moe] n_experts = 0: the model has none; set moe.n_experts to "
                  "a multiple of ep, or parallel.ep = 1");
  EXPECT_CONTAINS(load_error("[moe]\nn_experts = 6\n[parallel]\nep = 4\n", "parallel.ep", {}, 4),
                  "parallel.ep = 4 does not divide moe.n_experts = 6: every expert-parallel rank holds n_experts / ep "
                  "whole experts; pick ep from the divisors of n_experts");
  const std::string dp_msg = load_error(kMoe + "[parallel]\nep = 4\n", "parallel.ep", {}, 6);
  EXPECT_CONTAINS(dp_msg, "parallel.ep = 4 does not divide the data-parallel size parallel.dp = 6");
  EXPECT_CONTAINS(dp_msg, "pick ep from the divisors of dp");
  load_error(kMoe + "[parallel]\nep = 4\ndp = 2\n", "parallel.dp", {}, 2);
  // ep lies inside dp (Megatron's semantics): dp = world / (tp·cp·pp), whatever ep is.
  Config c = load_config(write(kMoe + "[parallel]\ntp = 2\nep = 2\n"), {});
  resolve_config(c, 8);
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.train.global_batch_size, 4 * c.train.micro_batch_size);
  c = load_config(write(kMoe + "[parallel]\nep = 8\n"), {});
  resolve_config(c, 8);
  EXPECT_EQ(c.parallel.dp, 8);
}

TEST_F(ConfigTest, MoeRoundTripsThroughTheResolvedToml) {
  for (const char* layers : {"[0, 2, 3]", "3"}) {
    SCOPED_TRACE(layers);
    Config a = load_config(write(std::string(R"([model]
n_layers = 4
[moe]
n_experts = 4
top_k = 1
layers = )") + layers + R"(
d_ff_expert = 64
router = "sigmoid"
aux_loss_coef = 0.01
z_loss_coef = 0.001
capacity_factor = 1.5
drop_policy = "position"
[parallel]
ep = 2
)"),
                           {});
    resolve_config(a, 2);
    const std::string text = config_to_toml(a);
    EXPECT_CONTAINS(text, std::string("\n[moe]\nn_experts = 4\ntop_k = 1\nlayers = ") + layers + "\n");
    Config b = load_config_text(text, a.source);
    resolve_config(b, 2);
    EXPECT_EQ(config_to_toml(b), text);
    const MoeConfig &x = a.model.moe, &y = b.model.moe;
    EXPECT_EQ(x.n_experts, y.n_experts);
    EXPECT_EQ(x.top_k, y.top_k);
    EXPECT_EQ(x.every, y.every);
    EXPECT_EQ(x.layers, y.layers);
    EXPECT_EQ(x.d_ff_expert, y.d_ff_expert);
    EXPECT_EQ(x.router, y.router);
    EXPECT_EQ(x.aux_loss_coef, y.aux_loss_coef);
    EXPECT_EQ(x.z_loss_coef, y.z_loss_coef);
    EXPECT_EQ(x.aux_free_bias, y.aux_free_bias);
    EXPECT_EQ(x.capacity_factor, y.capacity_factor);
    EXPECT_EQ(x.drop_policy, y.drop_policy);
    EXPECT_EQ(x.n_shared_experts, y.n_shared_experts);
    EXPECT_EQ(x.residual, y.residual);
    EXPECT_EQ(a.parallel, b.parallel);
  }
}

}  // namespace
}  // namespace megatrain
