// Multi-rank tests (mpirun -np 2 and 4) of the NCCL communicator's parts that need no GPU: the
// unique-id bootstrap over MPI (parallel/nccl_bootstrap.h) with a fake id generator, on the world
// and on every ProcessGroups group, and the split arguments (group_split) that the NCCL backend
// hands to ncclCommSplit, gathered from every rank and split as NCCL would, against the members of
// the MPI groups ProcessGroups built. Layouts: those of split_layouts() at this world size.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/groups.h"
#include "parallel/nccl_bootstrap.h"
#include "tests/parallel/split_model.h"

namespace megatrain {
namespace {

std::vector<ParallelDims> layouts_here() {
  std::vector<ParallelDims> here;
  for (const ParallelDims& d : test::split_layouts())
    if (d.world() == Comm::world().size()) here.push_back(d);
  return here;
}

// A fake id that differs on every world rank and group kind: any member that used its own instead
// of rank 0's is caught.
NcclUniqueIdBytes fake_id(int world_rank, int salt) {
  NcclUniqueIdBytes id;
  for (int i = 0; i < kNcclUniqueIdBytes; ++i) id[static_cast<size_t>(i)] = static_cast<char>(world_rank * 37 + salt * 11 + i);
  return id;
}

// The world ranks of `group`, in group-rank order (tests/parallel/test_groups_mpi.cpp's method).
std::vector<int> members(const Comm& group, int world_rank) {
  std::vector<float> slots(static_cast<size_t>(group.size()), 0.0f);
  slots[static_cast<size_t>(group.rank())] = static_cast<float>(world_rank + 1);
  group.all_reduce(slots.data(), static_cast<int64_t>(slots.size())).wait();
  std::vector<int> ranks;
  for (float s : slots) ranks.push_back(static_cast<int>(s) - 1);
  return ranks;
}

TEST(NcclBootstrapMpi, EveryMemberOfEveryGroupGetsRankZerosId) {
  const Comm world = Comm::world();
  ASSERT_FALSE(layouts_here().empty()) << "no layout of split_layouts() has " << world.size() << " ranks";
  int calls = 0;
  const NcclUniqueIdBytes on_world = nccl_bootstrap_unique_id(world, [&] {
    ++calls;
    return fake_id(world.rank(), 99);
  });
  EXPECT_EQ(on_world, fake_id(0, 99));
  EXPECT_EQ(calls, world.rank() == 0 ? 1 : 0);
  for (const ParallelDims& d : layouts_here()) {
    const ProcessGroups groups(world, d);
    for (GroupKind kind : kGroupKinds) {
      SCOPED_TRACE(std::string(group_kind_name(kind)) + " on world rank " + std::to_string(world.rank()));
      const int salt = static_cast<int>(kind);
      calls = 0;
      const NcclUniqueIdBytes id = nccl_bootstrap_unique_id(groups.get(kind), [&] {
        ++calls;
        return fake_id(world.rank(), salt);
      });
      EXPECT_EQ(id, fake_id(group_ranks(d, world.rank(), kind).front(), salt));  // the group's rank 0 made it
      EXPECT_EQ(calls, groups.get(kind).rank() == 0 ? 1 : 0);
    }
  }
}

// Rank 0's generator fails: rank 0 sees its own exception, every other member a CommError saying
// that rank 0 failed — nobody waits for an id that never comes.
TEST(NcclBootstrapMpi, FailureOnRankZeroFailsEveryMember) {
  const Comm world = Comm::world();
  auto failing = []() -> NcclUniqueIdBytes { throw std::runtime_error("fake ncclGetUniqueId: no network interface"); };
  if (world.rank() == 0) {
    EXPECT_THROW(nccl_bootstrap_unique_id(world, failing), std::runtime_error);
  } else {
    try {
      nccl_bootstrap_unique_id(world, failing);
      ADD_FAILURE() << "expected a CommError";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("the group's rank 0 could not create the id"), std::string::npos) << e.what();
    }
  }
  // The communicator is still in step: a later collective matches on every rank.
  int one = 1;
  world.all_reduce(&one, 1).wait();
  EXPECT_EQ(one, world.size());
}

// Every rank's (color, key) gathered over MPI and split as ncclCommSplit does gives each rank the
// members group_ranks documents, in order, which are also those of the MPI communicator that
// ProcessGroups built for it.
TEST(NcclBootstrapMpi, SplitArgumentsReproduceTheMpiGroups) {
  const Comm world = Comm::world();
  ASSERT_FALSE(layouts_here().empty()) << "no layout of split_layouts() has " << world.size() << " ranks";
  const std::vector<int64_t> two_each(static_cast<size_t>(world.size()), 2);
  for (const ParallelDims& d : layouts_here()) {
    const ProcessGroups groups(world, d);
    for (GroupKind kind : kGroupKinds) {
      SCOPED_TRACE(std::string(group_kind_name(kind)) + " on world rank " + std::to_string(world.rank()));
      const SplitKey mine = group_split(d, world.rank(), kind);
      const int32_t pair[2] = {mine.color, mine.key};
      std::vector<int32_t> gathered(static_cast<size_t>(2 * world.size()));
      world.all_gather(gathered.data(), pair, two_each).wait();
      std::vector<SplitKey> all;
      for (int r = 0; r < world.size(); ++r)
        all.push_back({.color = gathered[static_cast<size_t>(2 * r)], .key = gathered[static_cast<size_t>(2 * r + 1)]});
      const std::vector<int> nccl_members = test::split_members(all, world.rank());
      EXPECT_EQ(nccl_members, group_ranks(d, world.rank(), kind));
      EXPECT_EQ(nccl_members, members(groups.get(kind), world.rank()));
    }
  }
}

}  // namespace
}  // namespace megatrain
