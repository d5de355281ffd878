// GradBuckets: the buckets tile the flat range in whole units, close at the first unit that
// brings them to the requested size (walking down from the last unit), and map units back; and
// flat_partition's shards are ceil(n / p) floats, tiling [0, n) in rank order.
#include <gtest/gtest.h>

#include <algorithm>

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

// Groups (the chunks of an interleaved pipeline) split buckets at their first units: units
// {16, 32 | 48, 8} with room for everything make one bucket per group, the higher group first.
TEST(GradBuckets, NoBucketSpansTwoGroups) {
  const auto units = units_of({16, 32, 48, 8});
  const GradBuckets b(units, 1 << 30, {2});
  ASSERT_EQ(b.size(), 2);
  EXPECT_EQ(b[0].range, (FlatRange{48, 104}));
  EXPECT_EQ(b[1].range, (FlatRange{0, 48}));
  EXPECT_EQ(b.bucket_of(1), 1);
  EXPECT_EQ(b.bucket_of(2), 0);
}

TEST(GradBuckets, RejectsGapsBetweenUnits) {
  EXPECT_THROW(GradBuckets({{0, 10}, {12, 20}}, 5), Error);
}

TEST(FlatPartition, PadsToCeilAndTilesInRankOrder) {
  // {total, ranks, ceil(total / ranks), padding: ranks · ceil − total}, written out by hand: fewer
  // floats than ranks, exact division, a remainder of one and of ranks − 1, and nothing at all.
  struct Case {
    int64_t total;
    int ranks;
    int64_t shard, padding;
  };
  for (const Case c : {Case{0, 1, 0, 0}, Case{0, 4, 0, 0}, Case{1, 1, 1, 0}, Case{1, 4, 1, 3}, Case{3, 8, 1, 5},
                       Case{7, 2, 4, 1}, Case{7, 3, 3, 2}, Case{64, 4, 16, 0}, Case{64, 8, 8, 0}, Case{65, 4, 17, 3},
                       Case{1000, 3, 334, 2}, Case{1000, 8, 125, 0}, Case{1001, 8, 126, 7}}) {
    EXPECT_EQ(flat_shard_size(c.total, c.ranks), c.shard) << c.total << " over " << c.ranks;
    int64_t at = 0, padding = 0;
    for (int r = 0; r < c.ranks; ++r) {
      const FlatRange p = flat_partition(c.total, r, c.ranks);
      EXPECT_EQ(p.begin, at) << c.total << " over " << c.ranks << ", rank " << r;
      EXPECT_EQ(p.size(), std::min(c.shard, c.total - std::min(at, c.total))) << c.total << " over " << c.ranks;
      padding += c.shard - p.size();
      at = p.end;
    }
    EXPECT_EQ(at, c.total) << c.total << " over " << c.ranks;
    EXPECT_EQ(padding, c.padding) << c.total << " over " << c.ranks;
  }
}

}  // namespace
}  // namespace megatrain
