// What a checkpoint fixes (config/model_compat.h): architecture ([model] and [moe]) refused when it
// differs, training-only settings noted, function-changing settings warned; resolved defaults compare
// equal.
#include <gtest/gtest.h>

#include <fstream>

#include "config/model_compat.h"
#include "tests/expect_contains.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

// The config that --set SETS on an empty file gives.
Config config_of(const std::vector<std::string>& sets, const std::string& base = "") {
  const test::TempDir dir("model_compat");
  const std::string path = (dir / "model_compat.toml").string();
  std::ofstream(path) << base;
  return load_config(path, sets);
}

TEST(ModelCompat, TrainingOnlySettingsAreNotedNotRefused) {
  const std::string saved = config_to_toml(config_of({"model.dropout=0.1", "model.init_std=0.02"}));
  const ModelChanges c = model_changes(saved, config_of({"model.dropout=0.0", "model.init_std=0.5"}));
  EXPECT_TRUE(c.refused.empty());
  EXPECT_TRUE(c.warned.empty());
  ASSERT_EQ(c.noted.size(), 2u);
  EXPECT_EQ(c.noted[0], "model.dropout: checkpoint has 'dropout = 0.1', config has 'dropout = 0.0'");
  EXPECT_CONTAINS(c.noted[1], "model.init_std");
}

TEST(ModelCompat, ArchitectureIsRefusedKeyByKey) {
  const std::string saved = config_to_toml(config_of({}));
  for (const char* set :
       {"model.n_layers=3", "model.d_model=64", "model.n_heads=2", "model.n_kv_heads=2", "model.d_ff=100",
        "model.vocab_size=300", "model.norm=rmsnorm", "model.position=rope", "model.activation=swiglu",
        "model.bias=false", "model.qkv_bias=true", "model.tie_embeddings=false", "model.max_seq_len=512"}) {
    const ModelChanges c = model_changes(saved, config_of({set}));
    ASSERT_EQ(c.refused.size(), 1u) << set;
    EXPECT_CONTAINS(c.refused[0], std::string(set).substr(0, std::string(set).find('=')) + ":");
  }
}

TEST(ModelCompat, FunctionChangingSettingsAreWarned) {
  const std::string saved = config_to_toml(config_of({"model.position=rope"}));
  const ModelChanges c =
      model_changes(saved, config_of({"model.position=rope", "model.rope_theta=500000.0", "model.norm_eps=1e-6",
                                      "model.max_seq_len=1024", "model.rope_scaling=linear", "model.rope_factor=4.0"}));
  EXPECT_TRUE(c.refused.empty());
  EXPECT_EQ(c.warned.size(), 5u);  // context extension: RoPE scaling on a pretrained checkpoint
}

TEST(ModelCompat, ResolvedDefaultsEqualTheirExplicitValues) {
  const std::string saved = config_to_toml(config_of({}));  // n_kv_heads = 0, d_ff = 0
  const ModelChanges c = model_changes(saved, config_of({"model.n_kv_heads=4", "model.d_ff=512"}));
  EXPECT_TRUE(c.refused.empty()) << c.refused[0];
  EXPECT_TRUE(c.warned.empty());
  EXPECT_TRUE(c.noted.empty());
}

const std::vector<std::string> kMoe = {"moe.n_experts=4", "moe.layers=2"};

std::vector<std::string> moe_and(const std::vector<std::string>& sets) {
  std::vector<std::string> out = kMoe;
  out.insert(out.end(), sets.begin(), sets.end());
  return out;
}

TEST(ModelCompat, MoeArchitectureIsRefusedKeyByKey) {
  const std::string saved = config_to_toml(config_of(kMoe));
  for (const std::string set : {"moe.n_experts=8", "moe.top_k=1", "moe.layers=[1]", "moe.d_ff_expert=64",
                                "moe.router=sigmoid", "moe.n_shared_experts=1", "moe.residual=true"}) {
    const ModelChanges c = model_changes(saved, config_of(moe_and({set})));
    ASSERT_EQ(c.refused.size(), 1u) << set;
    EXPECT_CONTAINS(c.refused[0], set.substr(0, set.find('=')) + ": checkpoint has '");
  }
}

TEST(ModelCompat, MoeCoefficientsAreNotedAndCapacityWarned) {
  const std::string saved = config_to_toml(config_of(kMoe));
  const ModelChanges c = model_changes(
      saved, config_of(moe_and({"moe.aux_loss_coef=0.01", "moe.z_loss_coef=0.001", "moe.aux_free_bias=0.001",
                                "moe.capacity_factor=1.25", "moe.drop_policy=position"})));
  EXPECT_TRUE(c.refused.empty()) << c.refused[0];
  ASSERT_EQ(c.noted.size(), 3u);
  EXPECT_EQ(c.noted[0], "moe.aux_loss_coef: checkpoint has 'aux_loss_coef = 0.0', config has 'aux_loss_coef = 0.01'");
  ASSERT_EQ(c.warned.size(), 2u);
  EXPECT_CONTAINS(c.warned[0], "moe.capacity_factor");
  EXPECT_CONTAINS(c.warned[1], "moe.drop_policy");
}

TEST(ModelCompat, MoeBlocksAndExpertWidthCompareAsResolved) {
  const std::string saved = config_to_toml(config_of(kMoe));  // 4 blocks: 0 and 2 are MoE; d_ff_expert = 0
  const ModelChanges c =
      model_changes(saved, config_of({"moe.n_experts=4", "moe.layers=[0, 2]", "moe.d_ff_expert=512"}));
  EXPECT_TRUE(c.refused.empty()) << c.refused[0];
  EXPECT_TRUE(c.warned.empty());
  EXPECT_TRUE(c.noted.empty());
}

// A checkpoint written before [moe] existed is a dense model; a dense model ignores [moe].
TEST(ModelCompat, CheckpointWithoutMoeIsDense) {
  const std::string full = config_to_toml(config_of({}));
  const size_t from = full.find("[moe]"), to = full.find("[parallel]");
  ASSERT_LT(from, to);
  const std::string saved = full.substr(0, from) + full.substr(to);
  const ModelChanges c = model_changes(saved, config_of(kMoe));
  ASSERT_EQ(c.refused.size(), 2u);
  EXPECT_EQ(c.refused[0], "moe.n_experts: checkpoint has 'n_experts = 0', config has 'n_experts = 4'");
  EXPECT_CONTAINS(c.refused[1], "moe.layers:");
  const ModelChanges dense = model_changes(saved, config_of({"moe.top_k=4", "moe.capacity_factor=2.0"}));
  EXPECT_TRUE(dense.refused.empty());
  EXPECT_TRUE(dense.warned.empty());
  EXPECT_TRUE(dense.noted.empty());
}

}  // namespace
}  // namespace megatrain
