// Unit tests (no MPI) of the rank layout in parallel/groups.h: for every factorisation of world sizes
// 1..16 and 64 into (tp, cp, dp, pp) and every ep dividing dp, rank_coords/rank_of are inverse,
// every group kind partitions the world into groups of the documented size and membership, plus
// hand-written layouts and resolve_dims' errors.
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

// Every (tp, cp, dp, pp) whose product is `world`, with every ep that divides dp.
std::vector<ParallelDims> factorisations(int world) {
  std::vector<ParallelDims> out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp) continue;
    for (int cp = 1; cp <= world / tp; ++cp) {
      if ((world / tp) % cp) continue;
      for (int dp = 1; dp <= world / (tp * cp); ++dp) {
        if ((world / (tp * cp)) % dp) continue;
        for (int ep = 1; ep <= dp; ++ep) {
          if (dp % ep) continue;
          out.push_back(ParallelDims{.tp = tp, .cp = cp, .ep = ep, .dp = dp, .pp = world / (tp * cp * dp)});
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
    case GroupKind::edp: return d.dp / d.ep;
    case GroupKind::dp: return d.dp;
    case GroupKind::pp: return d.pp;
    case GroupKind::model: return d.world() / d.dp;
    case GroupKind::dp_cp: return d.cp * d.dp;
    case GroupKind::edp_cp: return d.cp * d.dp / d.ep;
  }
  return -1;
}

// The coordinates two ranks of one group may differ in; all others must be equal.
bool same_group(const RankCoords& a, const RankCoords& b, GroupKind kind) {
  RankCoords x = a, y = b;
  switch (kind) {
    case GroupKind::tp: x.tp = y.tp = 0; break;
    case GroupKind::cp: x.cp = y.cp = 0; break;
    case GroupKind::ep: x.ep = y.ep = x.dp = y.dp = 0; break;
    case GroupKind::edp: x.edp = y.edp = x.dp = y.dp = 0; break;
    case GroupKind::dp: x.ep = y.ep = x.edp = y.edp = x.dp = y.dp = 0; break;
    case GroupKind::pp: x.pp = y.pp = 0; break;
    case GroupKind::model: return a.dp == b.dp;
    case GroupKind::dp_cp: return a.tp == b.tp && a.pp == b.pp;
    case GroupKind::edp_cp: return a.tp == b.tp && a.pp == b.pp && a.ep == b.ep;
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
    EXPECT_TRUE(c.tp >= 0 && c.tp < d.tp && c.cp >= 0 && c.cp < d.cp && c.dp >= 0 && c.dp < d.dp && c.pp >= 0 &&
                c.pp < d.pp);
    EXPECT_EQ(c.ep, c.dp % d.ep);  // ep fastest inside dp
    EXPECT_EQ(c.edp, c.dp / d.ep);
    seen_coords.insert({c.tp, c.cp, c.dp, c.pp});
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
    for (size_t i = 1; i < pp.size(); ++i) ASSERT_EQ(pp[i] - pp[i - 1], d.tp * d.cp * d.dp);
    const std::vector<int> dp = group_ranks(d, r, GroupKind::dp);
    for (size_t i = 1; i < dp.size(); ++i) ASSERT_EQ(dp[i] - dp[i - 1], d.tp * d.cp);
    // Inside the dp group: the ep group is ep consecutive members, the edp group every ep-th one,
    // and the two meet only in r.
    const std::vector<int> ep = group_ranks(d, r, GroupKind::ep), edp = group_ranks(d, r, GroupKind::edp);
    for (size_t i = 1; i < ep.size(); ++i) ASSERT_EQ(ep[i] - ep[i - 1], d.tp * d.cp);
    for (size_t i = 1; i < edp.size(); ++i) ASSERT_EQ(edp[i] - edp[i - 1], d.tp * d.cp * d.ep);
    for (int m : ep) ASSERT_TRUE(std::find(dp.begin(), dp.end(), m) != dp.end()) << m;
    for (int m : edp) {
      ASSERT_TRUE(std::find(dp.begin(), dp.end(), m) != dp.end()) << m;
      ASSERT_TRUE(m == r || std::find(ep.begin(), ep.end(), m) == ep.end()) << m;
    }
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
  EXPECT_EQ(all.size(), 210u);  // 2^6 as tp·cp·ep·edp·pp, five powers of two: C(10, 4)
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
  EXPECT_EQ(rank_coords(d, 6), (RankCoords{.tp = 0, .edp = 1, .dp = 1, .pp = 1}));
  EXPECT_EQ(all_groups(d, GroupKind::ep), all_groups(d, GroupKind::cp));  // ep = 1: singletons
  EXPECT_EQ(all_groups(d, GroupKind::edp), all_groups(d, GroupKind::dp));
  EXPECT_EQ(all_groups(d, GroupKind::dp_cp), all_groups(d, GroupKind::dp));  // cp = 1
}

TEST(Groups, World16AllAxes) {
  // tp2 cp2 ep2 dp2 pp2: rank = tp + 2cp + 4dp + 8pp, and dp = ep (edp = 0).
  const ParallelDims d{.tp = 2, .cp = 2, .ep = 2, .dp = 2, .pp = 2};
  EXPECT_EQ(d.world(), 16);
  EXPECT_EQ(group_ranks(d, 5, GroupKind::cp), (std::vector<int>{5, 7}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::ep), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::edp), (std::vector<int>{5}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::pp), (std::vector<int>{5, 13}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::dp), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::model).size(), 8u);
  EXPECT_EQ(group_ranks(d, 5, GroupKind::dp_cp), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::edp_cp), (std::vector<int>{5, 7}));  // ep 1: cp 0 and 1
  EXPECT_EQ(rank_coords(d, 13), (RankCoords{.tp = 1, .cp = 0, .ep = 1, .edp = 0, .dp = 1, .pp = 1}));
}

TEST(Groups, World16Tp2Ep2Dp4Pp2) {
  // rank = tp + 2dp + 8pp with dp = ep + 2edp: Megatron-Core's expert groups for tp2 ep2 dp4 pp2.
  const ParallelDims d{.tp = 2, .ep = 2, .dp = 4, .pp = 2};
  EXPECT_EQ(d.world(), 16);
  EXPECT_EQ(all_groups(d, GroupKind::ep),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(all_groups(d, GroupKind::edp),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(all_groups(d, GroupKind::dp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::model), (std::vector<int>{4, 5, 12, 13}));
  EXPECT_EQ(group_ranks(d, 5, GroupKind::tp), (std::vector<int>{4, 5}));
  EXPECT_EQ(rank_coords(d, 13), (RankCoords{.tp = 1, .ep = 0, .edp = 1, .dp = 2, .pp = 1}));
  EXPECT_EQ(rank_coords(d, 7), (RankCoords{.tp = 1, .ep = 1, .edp = 1, .dp = 3, .pp = 0}));
}

TEST(Groups, World4Ep4IsOneExpertGroup) {
  const ParallelDims d{.ep = 4, .dp = 4};
  EXPECT_EQ(all_groups(d, GroupKind::ep), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(all_groups(d, GroupKind::edp), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(all_groups(d, GroupKind::dp), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(all_groups(d, GroupKind::model), (Groups{{0}, {1}, {2}, {3}}));
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
  EXPECT_THROW(rank_coords(ParallelDims{.ep = 2, .dp = 3}, 0), Error);  // ep must divide dp
  const ParallelDims e{.ep = 2, .dp = 4};
  EXPECT_THROW(rank_of(e, RankCoords{.ep = 1, .dp = 0}), Error);  // ep disagrees with dp
  EXPECT_THROW(rank_of(e, RankCoords{.ep = 1, .edp = 0, .dp = 3}), Error);
}

TEST(Groups, ResolveDims) {
  EXPECT_EQ(resolve_dims(8, 2, 1, 1, 2, 0), (ParallelDims{.tp = 2, .dp = 2, .pp = 2}));
  EXPECT_EQ(resolve_dims(8, 2, 1, 1, 2, 2), (ParallelDims{.tp = 2, .dp = 2, .pp = 2}));
  EXPECT_EQ(resolve_dims(1, 1, 1, 1, 1, 0), ParallelDims{});
  EXPECT_EQ(resolve_dims(64, 2, 2, 2, 2, 0).dp, 8);  // ep lies inside dp: dp = world / (tp·cp·pp)
  EXPECT_EQ(resolve_dims(8, 1, 1, 4, 1, 0), (ParallelDims{.ep = 4, .dp = 8}));
  EXPECT_EQ(resolve_dims(8, 2, 1, 2, 1, 4), (ParallelDims{.tp = 2, .ep = 2, .dp = 4}));
}

void expect_input_error(int world, int tp, int cp, int ep, int pp, int dp, const std::string& needle) {
  SCOPED_TRACE("world " + std::to_string(world));
  EXPECT_CONTAINS(test::input_error_of([&] { resolve_dims(world, tp, cp, ep, pp, dp); }), needle);
}

TEST(Groups, ResolveDimsErrors) {
  expect_input_error(6, 4, 1, 1, 1, 0, "not divisible by tp*cp*pp = 4");
  expect_input_error(8, 2, 1, 1, 2, 4, "tp*cp*pp*dp = 16 but the world has 8 ranks");
  expect_input_error(8, 2, 1, 1, 2, 1, "tp*cp*pp*dp = 4");
  expect_input_error(8, 2, 1, 2, 2, 4, "tp*cp*pp*dp = 16");  // ep is no factor of the world
  expect_input_error(6, 1, 1, 4, 1, 0,
                     "parallel.ep = 4 does not divide the data-parallel size parallel.dp = 6 (experts are split over "
                     "ep ranks inside each data-parallel group); pick ep from the divisors of dp, or make dp a "
                     "multiple of ep (the world a multiple of tp*cp*pp*ep = 4 ranks)");
  expect_input_error(4, 2, 1, 4, 1, 2, "parallel.ep = 4 does not divide the data-parallel size parallel.dp = 2");
  expect_input_error(8, 0, 1, 1, 1, 0, "must be >= 1");
  expect_input_error(8, 1, 1, 1, 1, -1, "must be >= 1");
  expect_input_error(0, 1, 1, 1, 1, 0, "world size must be >= 1");
}

}  // namespace
}  // namespace megatrain
