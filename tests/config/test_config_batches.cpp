// train.rampup_batch_size (config/train_batches.h): read as Megatron's [start, increment, samples],
// printed back, laid out as one pipeline schedule per micro-batch count, and refused — naming the
// file and the key — when the ramp cannot reach the global batch, a size is not a multiple of
// micro_batch_size · dp, or the pipeline schedule cannot take a size's micro-batches.
#include "config/rank_layout.h"
#include "config/train_batches.h"
#include "tests/config/config_fixture.h"

namespace megatrain {
namespace {

using test::ConfigTest;

constexpr const char* kRamp = "[train]\nmicro_batch_size = 2\nglobal_batch_size = 16\nrampup_batch_size = [4, 4, 40]\n";

TEST_F(ConfigTest, RampReadsPrintsAndLaysOutASchedulePerSize) {
  Config c = load_config(write(kRamp), {});
  resolve_config(c, 2);
  EXPECT_EQ(c.train.rampup_batch_size, (std::vector<int64_t>{4, 4, 40}));
  EXPECT_EQ(train_batch_sizes(c).sizes(), (std::vector<int64_t>{4, 8, 12, 16}));
  EXPECT_CONTAINS(config_to_toml(c), "rampup_batch_size = [4, 4, 40]\n");
  EXPECT_EQ(load_config_text(config_to_toml(c), "printed").train.rampup_batch_size, c.train.rampup_batch_size);
  const RankLayout r = rank_layout(c, 0, 0, 0);
  ASSERT_EQ(r.schedules.size(), 4u);  // dp 2, micro-batches of 2: 1, 2, 3 and 4 per step
  for (const auto& [micro, steps] : r.schedules) EXPECT_EQ(steps.size(), 2u * static_cast<size_t>(micro));
  Config constant = load_config(write("[train]\nmicro_batch_size = 2\nglobal_batch_size = 16\n"), {});
  resolve_config(constant, 2);
  EXPECT_EQ(rank_layout(constant, 0, 0, 0).schedules.size(), 1u);
}

TEST_F(ConfigTest, RampIsRefusedNamingTheKey) {
  const std::string base = "[train]\nmicro_batch_size = 2\nglobal_batch_size = 16\n";
  EXPECT_CONTAINS(load_error(base + "rampup_batch_size = [4, 4]\n", "train.rampup_batch_size"),
                  "must be [start, increment, samples]");
  EXPECT_CONTAINS(load_error(base + "rampup_batch_size = [4, 5, 40]\n", "train.rampup_batch_size"),
                  "an increment > 0 that divides global − start");
  EXPECT_CONTAINS(load_error(base + "rampup_batch_size = [16, 4, 40]\n", "train.rampup_batch_size"), "0 < start <");
  load_error(base + "rampup_batch_size = [4, 4, 0]\n", "train.rampup_batch_size");
  load_error(base + "rampup_batch_size = 4\n", "train.rampup_batch_size");
  // dp 4 × micro-batches of 2: 4 is not a multiple of 8.
  EXPECT_CONTAINS(
      load_error(base + "rampup_batch_size = [4, 4, 40]\n", "a batch size of train.rampup_batch_size", {}, 4),
      "= 4 is not divisible by train.micro_batch_size · dp = 2 · 4 = 8");
  // Interleaved over pp 2 needs an even micro-batch count: 6 / 2 = 3 is not.
  EXPECT_CONTAINS(load_error("[model]\nn_layers = 4\n[parallel]\npp = 2\npipeline_schedule = \"interleaved\"\n"
                             "virtual_stages = 2\n" +
                                 base + "rampup_batch_size = [6, 10, 40]\n",
                             "train.rampup_batch_size", {}, 2),
                  "3 micro-batches per step");
}

}  // namespace
}  // namespace megatrain
