// BatchSizes (data/batch_sizes.h) against Megatron-Core's RampupBatchsizeNumMicroBatchesCalculator
// worked by hand: update(consumed) sets start + increment · int(consumed / (samples / n)) while
// consumed ≤ samples, then the global batch; the run adds each batch's size to consumed.
// tests/reference/batch_ramp_reference.py runs Megatron's class itself against `megatrain train`.
#include "data/batch_sizes.h"

#include <gtest/gtest.h>

#include "kernels/check.h"

namespace megatrain {
namespace {

std::vector<int64_t> first_sizes(const BatchSizes& b, int n) {
  std::vector<int64_t> out;
  for (int k = 0; k < n; ++k) out.push_back(b.size(k));
  return out;
}

TEST(BatchSizes, ConstantIsGlobalEverywhere) {
  const BatchSizes b(16);
  EXPECT_EQ(first_sizes(b, 4), (std::vector<int64_t>{16, 16, 16, 16}));
  EXPECT_EQ(b.first_sample(7), 7 * 16);
  EXPECT_EQ(b.sizes(), std::vector<int64_t>{16});
  EXPECT_EQ(b.ramp_batches(), 0);
}

// [4, 4, 40] to 16: n = 3 increments of 40/3 samples. Consumed 0, 4, 8, 12 → int(c / 13.33) = 0:
// 4; 16, 24 → 1: 8; 32 → 2: 12; 44 > 40: 16 from then on.
TEST(BatchSizes, RampFollowsMegatronsUpdate) {
  const BatchSizes b(16, {4, 4, 40});
  EXPECT_EQ(first_sizes(b, 10), (std::vector<int64_t>{4, 4, 4, 4, 8, 8, 12, 16, 16, 16}));
  const std::vector<int64_t> firsts{0, 4, 8, 12, 16, 24, 32, 44, 60, 76};
  for (int k = 0; k < 10; ++k) EXPECT_EQ(b.first_sample(k), firsts[static_cast<size_t>(k)]) << "batch " << k;
  EXPECT_EQ(b.sizes(), (std::vector<int64_t>{4, 8, 12, 16}));
  EXPECT_EQ(b.ramp_batches(), 7);
}

// A quotient that is not whole, and a ramp that skips a size: [1, 1, 5] to 4, n = 3 increments of
// 5/3: consumed 0 → 1; 1 → int(0.6) = 0: 1; 2 → int(1.2) = 1: 2; 4 → int(2.4) = 2: 3; 7 > 5: 4.
// And [2, 2, 30] to 8 (3 increments of 10) lands on a boundary exactly: consumed 10 → int(1.0) = 1:
// 4, up to 18; 22 → 2: 6.
TEST(BatchSizes, RampCountsTheFloatQuotientAsMegatronDoes) {
  EXPECT_EQ(first_sizes(BatchSizes(4, {1, 1, 5}), 6), (std::vector<int64_t>{1, 1, 2, 3, 4, 4}));
  EXPECT_EQ(first_sizes(BatchSizes(8, {2, 2, 30}), 10), (std::vector<int64_t>{2, 2, 2, 2, 2, 4, 4, 4, 6, 6}));
  // 13 samples per increment, batches of 8 from 8 to 32: 0 → 8, 8 → 8, 16 → 16, 32 → 24 (int(2.46)), 56 > 39.
  EXPECT_EQ(first_sizes(BatchSizes(32, {8, 8, 39}), 6), (std::vector<int64_t>{8, 8, 16, 24, 32, 32}));
}

TEST(BatchSizes, ConsumedSamplesNameTheirBatch) {
  for (const BatchSizes& b : {BatchSizes(16, {4, 4, 40}), BatchSizes(4, {1, 1, 5}), BatchSizes(6)}) {
    for (int64_t k = 0; k < 50; ++k) {
      EXPECT_EQ(b.batch_starting_at(b.first_sample(k)), k);
      for (int64_t s = b.first_sample(k) + 1; s < b.first_sample(k + 1); ++s)
        EXPECT_FALSE(b.batch_starting_at(s)) << s << " samples are inside batch " << k;
    }
    EXPECT_FALSE(b.batch_starting_at(-1));
  }
}

TEST(BatchSizes, RefusesARampThatCannotReachTheGlobalBatch) {
  for (const BatchRamp r : {BatchRamp{16, 4, 40}, BatchRamp{20, 4, 40}, BatchRamp{0, 4, 40}, BatchRamp{4, 0, 40},
                            BatchRamp{4, 5, 40}, BatchRamp{4, 4, 0}})
    EXPECT_THROW(BatchSizes(16, r), InputError) << r.start << " " << r.increment << " " << r.samples;
}

}  // namespace
}  // namespace megatrain
