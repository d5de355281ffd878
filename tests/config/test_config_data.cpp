// The [data] section's blends and splits (config/config.cpp): both TOML forms of a blend, the
// round trip, and each malformed shape named with its entry and the fix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/config/config_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

using test::ConfigTest;

TEST_F(ConfigTest, DataBlendAndSplitParse) {
  Config c = load_config(write(R"([data]
train = [[0.7, "web"], [3, "code"]]
split = "98,1,1"
cache_dir = "idx-cache"
)"),
                         {});
  EXPECT_EQ(c.data.train, (std::vector<WeightedPrefix>{{0.7, "web"}, {3.0, "code"}}));
  EXPECT_TRUE(c.data.valid.empty());
  EXPECT_EQ(c.data.split, "98,1,1");
  EXPECT_EQ(c.data.cache_dir, "idx-cache");
  c = load_config(write(""), {"data.train=[[1, \"a\"], [2.5, \"b\"]]", "data.valid=v"});
  EXPECT_EQ(c.data.train, (std::vector<WeightedPrefix>{{1.0, "a"}, {2.5, "b"}}));
  EXPECT_EQ(c.data.valid, (std::vector<WeightedPrefix>{{1.0, "v"}}));
  c = load_config(write("[data]\ntrain = \"\"\n"), {});
  EXPECT_TRUE(c.data.train.empty());
}

TEST_F(ConfigTest, DataBlendRoundTripsBothForms) {
  for (const char* train : {R"("plain/prefix")", R"([[0.7, "web"], [0.3, "code"]])", R"([[2, "only"]])",
                            R"([[0.1, "a\"q"], [1e-3, "b"], [12345.5, "c"]])"}) {
    Config a = load_config(write(std::string("[data]\ntrain = ") + train + "\nvalid = [[1, \"v1\"], [1, \"v2\"]]\n"), {});
    const std::string text = config_to_toml(a);
    Config b = load_config(write(text, "y.toml"), {});
    EXPECT_EQ(a.data, b.data) << text;
    b.source = a.source;
    EXPECT_EQ(config_to_toml(b), text);
  }
  Config a = load_config(write("[data]\ntrain = [[0.7, \"web\"], [0.3, \"code\"]]\nsplit = \"969,30,1\"\n"), {});
  EXPECT_CONTAINS(config_to_toml(a), "train = [[0.7, \"web\"], [0.3, \"code\"]]\nvalid = \"\"\nsplit = \"969,30,1\"");
  a = load_config(write("[data]\ntrain = \"p\"\n"), {});
  EXPECT_CONTAINS(config_to_toml(a), "train = \"p\"\n");
}

TEST_F(ConfigTest, DataBlendBadShapesNameTheEntryAndTheFix) {
  const std::string fix = "must be [weight, \"prefix\"] with weight > 0";
  EXPECT_CONTAINS(load_error("[data]\ntrain = [[0.7, \"web\"], [0, \"code\"]]\n", "data.train[1]"), fix);
  EXPECT_CONTAINS(load_error("[data]\ntrain = [[-1, \"web\"]]\n", "data.train[0]"), fix);
  EXPECT_CONTAINS(load_error("[data]\ntrain = [[\"web\", 0.7]]\n", "data.train[0]"), fix);
  EXPECT_CONTAINS(load_error("[data]\ntrain = [[0.7]]\n", "data.train[0]"), fix);
  EXPECT_CONTAINS(load_error("[data]\ntrain = [[0.7, \"a\", 1]]\n", "data.train[0]"), fix);
  EXPECT_CONTAINS(load_error("[data]\ntrain = [\"web\"]\n", "data.train[0]"), fix);
  EXPECT_CONTAINS(load_error("[data]\ntrain = [[1, \"\"]]\n", "data.train[0]"), "non-empty prefix");
  EXPECT_CONTAINS(load_error("[data]\nvalid = [[1, \"a\"], [nan, \"b\"]]\n", "data.valid[1]"), fix);
  EXPECT_CONTAINS(load_error("[data]\ntrain = []\n", "'data.train'"), "non-empty array of [weight, \"prefix\"]");
  EXPECT_CONTAINS(load_error("[data]\ntrain = {a = 1}\n", "'data.train'"), "a prefix string or");
  EXPECT_CONTAINS(load_error("", "data.train[0]", {"data.train=[[0, \"x\"]]"}), "(from --set)");
}

TEST_F(ConfigTest, DataSplitRules) {
  for (const char* bad : {"98;1;1", "a", "0,0,0", "1,1,1,1", "-1,1,1"})
    EXPECT_CONTAINS(load_error(std::string("[data]\nsplit = \"") + bad + "\"\n", "data.split"), "e.g. \"98,1,1\"");
  EXPECT_CONTAINS(load_error("[data]\nsplit = \"98,1,1\"\nvalid = \"v\"\n", "data.valid"), "must be empty");
  load_error("[data]\nsplit = \"98,0,2\"\n[train]\neval_interval = 5\n", "train.eval_interval");
  Config c = load_config(write("[data]\nsplit = \"98,1,1\"\n[train]\neval_interval = 5\n"), {});
  EXPECT_NO_THROW(resolve_config(c, 1));
  c = load_config(write("[data]\nsplit = \"98,1\"\n"), {});
  EXPECT_NO_THROW(resolve_config(c, 1));
}

// Documents in a sample (README "Documents in a sample"): the three keys parse and round-trip, and
// each needs an end-of-document id inside the vocabulary; reset_attention_mask is refused on CUDA.
TEST_F(ConfigTest, DocumentKeysNeedAnEndOfDocumentTokenAndTheCpuForTheMask) {
  Config c = load_config(write("[data]\nreset_position_ids = true\nreset_attention_mask = true\neod_mask_loss = true\n"
                               "eod_token = 255\n"),
                         {});
  resolve_config(c, 1);
  EXPECT_TRUE(c.data.reset_position_ids && c.data.reset_attention_mask && c.data.eod_mask_loss);
  EXPECT_EQ(c.data.eod_token, 255);
  EXPECT_EQ(load_config(write(config_to_toml(c), "y.toml"), {}).data, c.data);
  for (const char* key : {"reset_position_ids", "reset_attention_mask", "eod_mask_loss"}) {
    EXPECT_CONTAINS(load_error(std::string("[data]\n") + key + " = true\n", "data.eod_token"),
                    "the end-of-document id preprocess appended");
    EXPECT_CONTAINS(load_error(std::string("[data]\n") + key + " = true\neod_token = 256\n", "data.eod_token"),
                    "in [0, model.vocab_size = 256); got 256");
  }
  EXPECT_CONTAINS(load_error("[data]\nreset_attention_mask = true\neod_token = 255\n[train]\ndevice = \"cuda\"\n",
                             "data.reset_attention_mask"),
                  "CPU backend only");
}

}  // namespace
}  // namespace megatrain
