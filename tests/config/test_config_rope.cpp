// model.rope_scaling and its parameters, and model.qkv_bias, in the run config: parsing, the TOML
// round trip, and the rules (model/config.cpp validate_rope_scaling), each message naming the file
// and the key (config_fixture.h).
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"
#include "tests/config/config_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

using test::ConfigTest;

const std::string kRope = "[model]\nposition = \"rope\"\n";

TEST_F(ConfigTest, RopeScalingKeysParseAndRoundTrip) {
  const Config c = load_config(write(kRope + "rope_scaling = \"llama3\"\nrope_factor = 32.0\n"
                                             "rope_original_max_len = 8192\nrope_high_freq_factor = 8.0\n"
                                             "qkv_bias = true\n"),
                               {});
  const RopeScalingConfig& r = c.model.rope_scaling;
  EXPECT_EQ(r.kind, RopeScaling::llama3);
  EXPECT_EQ(r.factor, 32.0f);
  EXPECT_EQ(r.original_max_len, 8192);
  EXPECT_EQ(r.low_freq_factor, 1.0f);  // Llama 3.1's, the default
  EXPECT_EQ(r.high_freq_factor, 8.0f);
  EXPECT_TRUE(c.model.qkv_bias);
  const Config back = load_config_text(config_to_toml(c), "printed");
  EXPECT_EQ(config_to_toml(load_config_text(config_to_toml(back), "printed")), config_to_toml(back));
  EXPECT_EQ(back.model.rope_scaling.kind, RopeScaling::llama3);
  EXPECT_EQ(load_config(write(kRope), {}).model.rope_scaling.kind, RopeScaling::none);
}

TEST_F(ConfigTest, RopeScalingRules) {
  EXPECT_CONTAINS(load_error("[model]\nrope_scaling = \"linear\"\nrope_factor = 2.0\n", "model.rope_scaling"),
                  "set position = \"rope\"");
  EXPECT_CONTAINS(load_error(kRope + "rope_scaling = \"ntk\"\n", "'model.rope_scaling'"),
                  "\"none\", \"linear\", \"llama3\", \"yarn\"");
  EXPECT_CONTAINS(load_error(kRope + "rope_scaling = \"linear\"\nrope_factor = 0.5\n", "model.rope_factor"),
                  "at least 1");
  EXPECT_CONTAINS(load_error(kRope + "rope_scaling = \"llama3\"\nrope_factor = 8.0\n", "model.rope_original_max_len"),
                  "Llama 3.1: 8192");
  load_error(kRope +
                 "rope_scaling = \"llama3\"\nrope_factor = 8.0\nrope_original_max_len = 64\n"
                 "rope_low_freq_factor = 4.0\n",
             "model.rope_high_freq_factor");
  load_error(kRope + "rope_scaling = \"yarn\"\nrope_factor = 4.0\nrope_beta_fast = 1.0\n", "model.rope_beta_slow");
  load_error(kRope + "rope_attention_factor = -1.0\n", "model.rope_attention_factor");
  load_error(kRope + "rope_original_max_len = -1\n", "model.rope_original_max_len");
}

}  // namespace
}  // namespace megatrain
