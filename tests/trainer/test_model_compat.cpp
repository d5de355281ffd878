// What a checkpoint fixes (trainer/model_compat.h): architecture refused when it differs, training-only
// settings noted, function-changing settings warned; resolved defaults compare equal.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/expect_contains.h"
#include "tests/temp_dir.h"
#include "trainer/model_compat.h"

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
  for (const char* set : {"model.n_layers=3", "model.d_model=64", "model.n_heads=2", "model.n_kv_heads=2",
                          "model.d_ff=100", "model.vocab_size=300", "model.norm=rmsnorm", "model.position=rope",
                          "model.activation=swiglu", "model.bias=false", "model.tie_embeddings=false",
                          "model.max_seq_len=512"}) {
    const ModelChanges c = model_changes(saved, config_of({set}));
    ASSERT_EQ(c.refused.size(), 1u) << set;
    EXPECT_CONTAINS(c.refused[0], std::string(set).substr(0, std::string(set).find('=')) + ":");
  }
}

TEST(ModelCompat, FunctionChangingSettingsAreWarned) {
  const std::string saved = config_to_toml(config_of({"model.position=rope"}));
  const ModelChanges c =
      model_changes(saved, config_of({"model.position=rope", "model.rope_theta=500000.0", "model.norm_eps=1e-6",
                                      "model.max_seq_len=1024"}));
  EXPECT_TRUE(c.refused.empty());
  EXPECT_EQ(c.warned.size(), 3u);
}

TEST(ModelCompat, ResolvedDefaultsEqualTheirExplicitValues) {
  const std::string saved = config_to_toml(config_of({}));  // n_kv_heads = 0, d_ff = 0
  const ModelChanges c = model_changes(saved, config_of({"model.n_kv_heads=4", "model.d_ff=512"}));
  EXPECT_TRUE(c.refused.empty()) << c.refused[0];
  EXPECT_TRUE(c.warned.empty());
  EXPECT_TRUE(c.noted.empty());
}

}  // namespace
}  // namespace megatrain
