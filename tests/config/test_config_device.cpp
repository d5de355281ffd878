// The config keys of a run on a GPU (config/config.h): train.attention_backend is "auto" unless
// set, takes "flash" and "cudnn", names its spellings when misspelt, and "cudnn" needs
// train.device = "cuda".
#include <gtest/gtest.h>

#include "tests/config/config_fixture.h"

namespace megatrain {
namespace {

using test::ConfigTest;

TEST_F(ConfigTest, AttentionBackendSpellingsAndCudnnNeedsAGpu) {
  EXPECT_EQ(load_config(write(""), {}).train.attention_backend, AttentionImpl::automatic);
  const std::string gpu = "[train]\ndevice = \"cuda\"\n";
  for (const auto& [text, impl] : {std::pair{"flash", AttentionImpl::flash}, std::pair{"cudnn", AttentionImpl::cudnn},
                                   std::pair{"auto", AttentionImpl::automatic}}) {
    Config c = load_config(write(gpu + "attention_backend = \"" + text + "\"\n"), {});
    resolve_config(c, 1);
    EXPECT_EQ(c.train.attention_backend, impl) << text;
  }
  EXPECT_CONTAINS(load_error("[train]\nattention_backend = \"sdpa\"\n", "train.attention_backend"), "cudnn");
  EXPECT_CONTAINS(load_error("[train]\nattention_backend = \"cudnn\"\n", "train.attention_backend"),
                  "set train.device = \"cuda\", or attention_backend = \"auto\"");
}

// optimizer.state_dtype: fp32 or bf16 read; fp16 refused (g² leaves its range); bf16 refused on a
// device, whose AdamW kernel keeps float32 moments.
TEST_F(ConfigTest, OptimizerStateDtypeIsFp32OrBf16OnTheCpu) {
  Config c = load_config(write("[optimizer]\nstate_dtype = \"bf16\"\n"), {});
  resolve_config(c, 1);
  EXPECT_EQ(c.optimizer.state_dtype, Precision::bf16);
  EXPECT_CONTAINS(load_error("[optimizer]\nstate_dtype = \"fp16\"\n", "optimizer.state_dtype"), "leaves fp16's range");
  EXPECT_CONTAINS(
      load_error("[train]\ndevice = \"cuda\"\n[optimizer]\nstate_dtype = \"bf16\"\n", "optimizer.state_dtype"),
      "a CPU path so far");
}

}  // namespace
}  // namespace megatrain
