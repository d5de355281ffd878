// Multi-rank test (mpirun -np 4) of ProcessGroups: each communicator built by MPI_Comm_split holds
// exactly the world ranks group_ranks predicts, in the same order (group rank i = i-th listed rank).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/check.h"
#include "parallel/comm.h"
#include "parallel/groups.h"

namespace megatrain {
namespace {

// The world ranks of `group`, in group-rank order: each member writes world_rank + 1 at its group
// rank in a zeroed vector, and a sum all-reduce within the group gathers them.
std::vector<int> members(const Comm& group, int world_rank) {
  std::vector<float> slots(static_cast<size_t>(group.size()), 0.0f);
  slots[static_cast<size_t>(group.rank())] = static_cast<float>(world_rank + 1);
  group.all_reduce(slots.data(), static_cast<int64_t>(slots.size())).wait();
  std::vector<int> ranks;
  for (float s : slots) ranks.push_back(static_cast<int>(s) - 1);
  return ranks;
}

void check_groups(const ParallelDims& dims) {
  const Comm world = Comm::world();
  ASSERT_EQ(world.size(), 4) << "run with mpirun -np 4";
  const ProcessGroups groups(world, dims);
  EXPECT_EQ(groups.coords(), rank_coords(dims, world.rank()));
  EXPECT_EQ(groups.world().rank(), world.rank());
  for (GroupKind kind : kGroupKinds) {
    const Comm& c = groups.get(kind);
    SCOPED_TRACE(std::string(group_kind_name(kind)) + " on world rank " + std::to_string(world.rank()));
    EXPECT_EQ(c.name(), group_kind_name(kind));
    EXPECT_EQ(members(c, world.rank()), group_ranks(dims, world.rank(), kind));
  }
  EXPECT_EQ(&groups.tp(), &groups.get(GroupKind::tp));
  EXPECT_EQ(&groups.pp(), &groups.get(GroupKind::pp));
  EXPECT_EQ(groups.dp().size(), dims.dp);
  EXPECT_EQ(groups.ep().size(), dims.ep);
  EXPECT_EQ(groups.edp().size(), dims.dp / dims.ep);
  EXPECT_EQ(groups.model().size(), dims.world() / dims.dp);
}

TEST(ProcessGroupsMpi, Tp2Dp2) { check_groups(ParallelDims{.tp = 2, .dp = 2}); }
TEST(ProcessGroupsMpi, Pp2Dp2) { check_groups(ParallelDims{.dp = 2, .pp = 2}); }
TEST(ProcessGroupsMpi, Tp2Pp2) { check_groups(ParallelDims{.tp = 2, .pp = 2}); }
// Expert parallelism inside dp, on 4 ranks: ep groups {0, 2}, {1, 3} beside cp groups {0, 1}, {2, 3};
// ep {0, 1}, {2, 3} with edp {0, 2}, {1, 3}; one ep group of all four.
TEST(ProcessGroupsMpi, Cp2Ep2Dp2) { check_groups(ParallelDims{.cp = 2, .ep = 2, .dp = 2}); }
TEST(ProcessGroupsMpi, Ep2Dp4) { check_groups(ParallelDims{.ep = 2, .dp = 4}); }
TEST(ProcessGroupsMpi, Ep4Dp4) { check_groups(ParallelDims{.ep = 4, .dp = 4}); }

TEST(ProcessGroupsMpi, SplitCommsOutliveTheirCopies) {
  const Comm world = Comm::world();
  Comm kept = world.split(world.rank() % 2, world.rank(), "half");
  {
    const Comm copy = kept;  // copies share the handle; destroying one must not free it
    EXPECT_EQ(copy.size(), 2);
  }
  double one = 1.0;
  kept.all_reduce(&one, 1).wait();
  EXPECT_DOUBLE_EQ(one, 2.0);
}

TEST(ProcessGroupsMpi, WrongWorldSizeIsInputError) {
  const ParallelDims eight{.tp = 2, .dp = 4};
  EXPECT_THROW(ProcessGroups(Comm::world(), eight), InputError);
}

}  // namespace
}  // namespace megatrain
