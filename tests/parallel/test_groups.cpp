// Unit tests (no MPI) of the rank layout in parallel/groups.h: for every factorisation of world sizes
// 1..16 and 64 into (tp, cp, ep, dp, pp), rank_coords/rank_of are inverse, every group kind
// partitions the world into groups of the documented size and membership, plus hand-written
// layouts and resolve_dims' errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "parallel/groups.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"

namespace megatrain {
namespace {

// Every (tp, cp, ep, dp, pp) whose product is `world`.
std::vector<ParallelDims> factorisations(int world) {
  std::vector<ParallelDims> out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp) continue;
    for (int cp = 1; cp <= world / tp; ++cp) {
      if ((world / tp) % cp) continue;
      for (int ep = 1; ep <= world / (tp * cp); ++ep) {
        if ((world / (tp * cp)) % ep) continue;
        for (int dp = 1; dp <= world / (tp * cp * ep); ++dp) {
          if ((world / (tp * cp * ep)) % dp) continue;
          out.push_back(ParallelDims{.tp = tp, .cp = cp, .ep = ep, .dp = dp, .pp = world / (tp * cp * ep * dp)});
        }
      }
    }
  }
  return out;
}

int expected_size(const ParallelDims& d, GroupKind kind) {
  switch (kind) {
    case GroupKind::tp: return d.tp;
    case GroupKind::cp: return d.cp;
    case GroupKind::ep: return d.ep;
    case GroupKind::dp: return d.dp;
    case GroupKind::pp: return d.pp;
    case GroupKind::model: return d.world() / d.dp;
  }
  return -1;
}

// The coordinates two ranks of one group may differ in; all others must be equal.
bool same_group(const RankCoords& a, const RankCoords& b, GroupKind kind) {
  RankCoords x = a, y = b;
  switch (kind) {
    case GroupKind::tp: x.tp = y.tp = 0; break;
    case GroupKind::cp: x.cp = y.cp = 0; break;
    case GroupKind::ep: x.ep = y.ep = 0; break;
    case GroupKind::dp: x.dp = y.dp = 0; break;
    case GroupKind::pp: x.pp = y.pp = 0; break;
    case GroupKind::model: return a.dp == b.dp;
  }
  return x == y;
}

std::string describe(const ParallelDims& d) {
  return "tp" + std::to_string(d.tp) + " cp" + std::to_string(d.cp) + " ep" + std::to_string(d.ep) + " dp" +
         std::to_string(d.dp) + " pp" + std::to_string(d.pp);
}

void check_layout(const ParallelDims& d) {
  SCOPED_TRACE(describe(d));
  const int world = d.world();
  std::set<std::vector<int>> seen_coords;
  for (int r = 0; r < world; ++r) {
    const RankCoords c = rank_coords(d, r);
    ASSERT_EQ(rank_of(d, c), r);
    EXPECT_TRUE(c.tp >= 0 && c.tp < d.tp && c.cp >= 0 && c.cp < d.cp && c.ep >= 0 && c.ep < d.ep && c.dp >= 0 &&
                c.dp < d.dp && c.pp >= 0 && c.pp < d.pp);
    seen_coords.insert({c.tp, c.cp, c.ep, c.dp, c.pp});
  }
  EXPECT_EQ(static_cast<int>(seen_coords.size()), world);

  for (GroupKind kind : kGroupKinds) {
    SCOPED_TRACE(std::string(group_kind_name(kind)));
    std::vector<int> owner(static_cast<size_t>(world), -1);  // group index that claimed each rank
    std::set<int> indices;
    for (int r = 0; r < world; ++r) {
      const std::vector<int> g = group_ranks(d, r, kind);
      ASSERT_EQ(static_cast<int>(g.size()), expected_size(d, kind));
      ASSERT_TRUE(std::is_sorted(g.begin(), g.end()));
      ASSERT_TRUE(std::adjacent_find(g.begin(), g.end()) == g.end());
      ASSERT_TRUE(std::find(g.begin(), g.end(), r) != g.end()) << "rank " << r << " not in its own group";
      const int index = group_index(d, r, kind);
      ASSERT_GE(index, 0);
      ASSERT_LT(index, world);
      indices.insert(index);
      for (int m : g) {
        ASSERT_TRUE(same_group(rank_coords(d, r), rank_coords(d, m), kind)) << r << " vs " << m;
        ASSERT_EQ(group_ranks(d, m, kind), g) << "groups of " << r << " and " << m << " differ";
        ASSERT_EQ(group_index(d, m, kind), index);
        ASSERT_TRUE(owner[static_cast<size_t>(m)] == -1 || owner[static_cast<size_t>(m)] == index);
        owner[static_cast<size_t>(m)] = index;
      }
    }
    // Partition: every rank claimed, number of groups = world / group size, indices distinct per group.
    EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
    EXPECT_EQ(static_cast<int>(indices.size()), world / expected_size(d, kind));
  }

  for (int r = 0; r < world; ++r) {
    const std::vector<int> tp = group_ranks(d, r, GroupKind::tp);  // contiguous ranks
    for (size_t i = 1; i < tp.size(); ++i) ASSERT_EQ(tp[i], tp[i - 1] + 1);
    const std::vector<int> pp = group_ranks(d, r, GroupKind::pp);  // stages one stride apart
    for (size_t i = 1; i < pp.size(); ++i) ASSERT_EQ(pp[i] - pp[i - 1], d.tp * d.cp * d.ep * d.dp);
    const std::vector<int> dp = group_ranks(d, r, GroupKind::dp);
    for (size_t i = 1; i < dp.size(); ++i) ASSERT_EQ(dp[i] - dp[i - 1], d.tp * d.cp * d.ep);
    EXPECT_EQ(rank_coords(d, pp.front()).pp, 0);
    EXPECT_EQ(rank_coords(d, pp.back()).pp, d.pp - 1);
  }
}

TEST(Groups, AllFactorisationsOfSmallWorlds) {
  int layouts = 0;
  for (int world = 1; world <= 16; ++world)
    for (const ParallelDims& d : factorisations(world)) {
      ASSERT_EQ(d.world(), world);
      check_layout(d);
      ++layouts;
    }
  EXPECT_GT(layouts, 100);
}

TEST(Groups, AllFactorisationsOf64) {
  const std::vector<ParallelDims> all = factorisations(64);
  EXPECT_EQ(all.size(), 210u);  // compositions of 2^6 into 5 powers of two: C(10, 4)
  for (const ParallelDims& d : all) check_layout(d);
}

std::vector<std::vector<int>> all_groups(const ParallelDims& d, GroupKind kind) {
  std::set<std::vector<int>> groups;
  for (int r = 0; r < d.world(); ++r) groups.insert(group_ranks(d, r, kind));
  return {groups.begin(), groups.end()};
}

using Groups = std::vector<std::vector<int>>;

TEST(Groups, World8Tp2Pp2Dp2) {
  const ParallelDims d{.tp = 2, .dp = 2, .pp = 2};
  EXPECT_EQ(all_groups(d, GroupKind::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(all_groups(d, GroupKind::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(all_groups(d, GroupKind::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(all_groups(d, GroupKind::model), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(all_groups(d, GroupKind::cp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(rank_coords(d, 6), (RankCoords{.tp = 0, .dp = 1, .pp = 1}));
}

TEST(Groups, World16AllAxes) {
  // tp2 cp2 ep2 dp1 pp2: rank = tp + 2cp + 4ep + 8pp.
  const ParallelDims d{.tp = 2, .cp = 2, .ep = 2, .dp = 1, .pp = 2};
  EXPECT_EQ(group_ranks(d, 5, GroupKind::cp), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::ep), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::pp), (std::vector<int>{5, 13}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::dp), (std::vector<int>{5}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::model).size(), 16u);
  EXPECT_EQ(rank_coords(d, 13), (RankCoords{.tp = 1, .cp = 0, .ep = 1, .dp = 0, .pp = 1}));
}

TEST(Groups, World8Dp4Pp2IsMegatronOrder) {
  // Megatron's RankGenerator with tp=1, dp=4, pp=2: dp groups {0..3}, {4..7}; pp groups {i, i+4}.
  const ParallelDims d{.dp = 4, .pp = 2};
  EXPECT_EQ(all_groups(d, GroupKind::dp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(all_groups(d, GroupKind::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(Groups, OutOfRangeIsAnError) {
  const ParallelDims d{.tp = 2, .dp = 2};
  EXPECT_THROW(rank_coords(d, 4), Error);
  EXPECT_THROW(rank_coords(d, -1), Error);
  EXPECT_THROW(rank_of(d, RankCoords{.tp = 2}), Error);
  EXPECT_THROW(rank_coords(ParallelDims{.tp = 0}, 0), Error);
}

TEST(Groups, ResolveDims) {
  EXPECT_EQ(resolve_dims(8, 2, 1, 1, 2, 0), (ParallelDims{.tp = 2, .dp = 2, .pp = 2}));
  EXPECT_EQ(resolve_dims(8, 2, 1, 1, 2, 2), (ParallelDims{.tp = 2, .dp = 2, .pp = 2}));
  EXPECT_EQ(resolve_dims(1, 1, 1, 1, 1, 0), ParallelDims{});
  EXPECT_EQ(resolve_dims(64, 2, 2, 2, 2, 0).dp, 4);
}

void expect_input_error(int world, int tp, int cp, int ep, int pp, int dp, const std::string& needle) {
  SCOPED_TRACE("world " + std::to_string(world));
  EXPECT_CONTAINS(test::input_error_of([&] { resolve_dims(world, tp, cp, ep, pp, dp); }), needle);
}

TEST(Groups, ResolveDimsErrors) {
  expect_input_error(6, 4, 1, 1, 1, 0, "not divisible by tp*cp*ep*pp = 4");
  expect_input_error(8, 2, 1, 1, 2, 4, "tp*cp*ep*pp*dp = 16 but the world has 8 ranks");
  expect_input_error(8, 2, 1, 1, 2, 1, "tp*cp*ep*pp*dp = 4");
  expect_input_error(8, 0, 1, 1, 1, 0, "must be >= 1");
  expect_input_error(8, 1, 1, 1, 1, -1, "must be >= 1");
  expect_input_error(0, 1, 1, 1, 1, 0, "world size must be >= 1");
}

}  // namespace
}  // namespace megatrain
