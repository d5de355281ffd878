// GradBuckets: the buckets tile the flat range in whole units, close at the first unit that
// brings them to the requested size (walking down from the last unit), and map units back.
#include <gtest/gtest.h>

#include "parallel/grad_buckets.h"

namespace megatrain {
namespace {

std::vector<FlatRange> units_of(const std::vector<int64_t>& sizes) {
  std::vector<FlatRange> u;
  int64_t at = 0;
  for (int64_t s : sizes) {
    u.push_back({at, at + s});
    at += s;
  }
  return u;
}

TEST(GradBuckets, TileTheRangeInWholeUnitsFromTheLastUnitDown) {
  const auto units = units_of({100, 40, 40, 40, 10, 30});  // total 260
  const GradBuckets b(units, 60);
  // From the top: {30,10,40} = 80 ≥ 60 closes; {40,40} = 80; {100} is what is left.
  ASSERT_EQ(b.size(), 3);
  EXPECT_EQ(b[0].range, (FlatRange{180, 260}));
  EXPECT_EQ(b[0].first_unit, 3);
  EXPECT_EQ(b[0].last_unit, 5);
  EXPECT_EQ(b[1].range, (FlatRange{100, 180}));
  EXPECT_EQ(b[2].range, (FlatRange{0, 100}));
  EXPECT_EQ(b[2].num_units(), 1);
  const int expected_bucket[] = {2, 1, 1, 0, 0, 0};
  for (int u = 0; u < 6; ++u) EXPECT_EQ(b.bucket_of(u), expected_bucket[u]) << "unit " << u;
  EXPECT_EQ(b.max_floats(), 100);
}

TEST(GradBuckets, OneBucketWhenTheSizeExceedsEverythingAndOnePerUnitWhenTiny) {
  const auto units = units_of({16, 32, 48});
  const GradBuckets all(units, 1 << 30);
  ASSERT_EQ(all.size(), 1);
  EXPECT_EQ(all[0].range, (FlatRange{0, 96}));
  const GradBuckets each(units, 1);
  ASSERT_EQ(each.size(), 3);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(each[k].range, units[static_cast<size_t>(2 - k)]);
}

TEST(GradBuckets, RejectsGapsBetweenUnits) {
  EXPECT_THROW(GradBuckets({{0, 10}, {12, 20}}, 5), Error);
}

TEST(FlatPartition, PadsToCeilAndTilesInRankOrder) {
  for (int64_t total : {0, 1, 7, 64, 1000}) {
    for (int ranks : {1, 2, 3, 4, 8}) {
      int64_t at = 0;
      for (int r = 0; r < ranks; ++r) {
        const FlatRange p = flat_partition(total, r, ranks);
        EXPECT_EQ(p.begin, at);
        EXPECT_LE(p.size(), flat_shard_size(total, ranks));
        at = p.end;
      }
      EXPECT_EQ(at, total);
    }
  }
}

}  // namespace
}  // namespace megatrain
