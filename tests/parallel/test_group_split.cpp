// Unit tests (no MPI) of group_split (parallel/groups.h): for every layout of split_layouts() and
// every group kind, the split that MPI_Comm_split and ncclCommSplit compute from every rank's
// (color, key) gives each rank exactly group_ranks, in order, and the colors are valid for NCCL.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/groups.h"
#include "tests/parallel/split_model.h"

namespace megatrain {
namespace {

std::string layout_name(const ParallelDims& d) {
  return "tp" + std::to_string(d.tp) + " cp" + std::to_string(d.cp) + " ep" + std::to_string(d.ep) + " dp" +
         std::to_string(d.dp) + " pp" + std::to_string(d.pp);
}

TEST(GroupSplit, ReproducesEveryGroupInOrder) {
  for (const ParallelDims& d : test::split_layouts())
    for (GroupKind kind : kGroupKinds) {
      SCOPED_TRACE(layout_name(d) + " group " + std::string(group_kind_name(kind)));
      const std::vector<SplitKey> all = test::all_splits(d, kind);
      for (int r = 0; r < d.world(); ++r) ASSERT_EQ(test::split_members(all, r), group_ranks(d, r, kind)) << "rank " << r;
    }
}

// ncclCommSplit takes colors >= 0 (NCCL_SPLIT_NOCOLOR is -1), and MPI and NCCL order by key
// alone only when keys are distinct.
TEST(GroupSplit, ColorsAreNonNegativeAndKeysDistinct) {
  for (const ParallelDims& d : test::split_layouts())
    for (GroupKind kind : kGroupKinds) {
      SCOPED_TRACE(layout_name(d) + " group " + std::string(group_kind_name(kind)));
      const std::vector<SplitKey> all = test::all_splits(d, kind);
      for (int r = 0; r < d.world(); ++r) {
        EXPECT_GE(all[static_cast<size_t>(r)].color, 0);
        EXPECT_EQ(all[static_cast<size_t>(r)].key, r);
      }
    }
}

// The model the tests trust: a color's members ordered by key, then by parent rank.
TEST(GroupSplit, ModelOrdersByKeyThenParentRank) {
  const std::vector<SplitKey> all = {{.color = 1, .key = 5}, {.color = 0, .key = 0}, {.color = 1, .key = 2},
                                     {.color = 1, .key = 5}};
  EXPECT_EQ(test::split_members(all, 0), (std::vector<int>{2, 0, 3}));
  EXPECT_EQ(test::split_members(all, 1), (std::vector<int>{1}));
}

}  // namespace
}  // namespace megatrain
