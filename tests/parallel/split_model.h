// What a communicator split computes from every parent rank's (color, key), as MPI_Comm_split and
// ncclCommSplit both define it: the parent ranks sharing a color form one communicator, ordered by
// key, ties by parent rank. The tests check group_split against it, so the NCCL groups (split with
// the same arguments) hold exactly ProcessGroups' ranks in the same order.
#pragma once
#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "parallel/groups.h"

namespace megatrain::test {

// The parent ranks of parent rank `rank`'s new communicator, in new-rank order; `all[r]` is rank
// r's split arguments.
inline std::vector<int> split_members(std::span<const SplitKey> all, int rank) {
  std::vector<std::pair<int, int>> by_key;  // (key, parent rank)
  for (int r = 0; r < static_cast<int>(all.size()); ++r)
    if (all[static_cast<size_t>(r)].color == all[static_cast<size_t>(rank)].color)
      by_key.emplace_back(all[static_cast<size_t>(r)].key, r);
  std::sort(by_key.begin(), by_key.end());
  std::vector<int> members;
  for (const auto& [key, r] : by_key) members.push_back(r);
  return members;
}

// Every rank's split arguments for `kind`, as ProcessGroups passes them.
inline std::vector<SplitKey> all_splits(const ParallelDims& dims, GroupKind kind) {
  std::vector<SplitKey> all;
  for (int r = 0; r < dims.world(); ++r) all.push_back(group_split(dims, r, kind));
  return all;
}

// Layouts over every axis, ep inside dp, at 2, 4, 8 and 16 ranks.
inline std::vector<ParallelDims> split_layouts() {
  return {ParallelDims{.tp = 2},
          ParallelDims{.pp = 2},
          ParallelDims{.dp = 2},
          ParallelDims{.cp = 2},
          ParallelDims{.ep = 2, .dp = 2},
          ParallelDims{.tp = 2, .dp = 2},
          ParallelDims{.tp = 2, .pp = 2},
          ParallelDims{.cp = 2, .ep = 2, .dp = 2},
          ParallelDims{.ep = 2, .dp = 4},
          ParallelDims{.tp = 2, .cp = 2, .ep = 2, .dp = 2},
          ParallelDims{.tp = 2, .ep = 2, .dp = 4, .pp = 2},
          ParallelDims{.tp = 2, .cp = 2, .ep = 2, .dp = 2, .pp = 2}};
}

}  // namespace megatrain::test
