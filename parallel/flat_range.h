// Ranges of a flat buffer and the data-parallel partition of one. Parameters, gradients and
// optimizer state share one flat layout (model/params.h), so a gradient bucket, a model unit and a
// ZeRO shard are all FlatRanges. Invariant: flat_partition(total, ·, ranks) tiles [0, total) in
// rank order with pieces of at most ceil(total / ranks) floats.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/check.h"

namespace megatrain {

// [begin, end) in floats of a flat buffer.
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  FlatRange shifted(int64_t by) const { return {begin + by, end + by}; }
  bool operator==(const FlatRange&) const = default;
};

inline FlatRange flat_intersect(FlatRange a, FlatRange b) {
  const int64_t lo = std::max(a.begin, b.begin), hi = std::min(a.end, b.end);
  return lo < hi ? FlatRange{lo, hi} : FlatRange{lo, lo};
}

// The size every rank's shard buffer is padded to: ceil(total / ranks).
inline int64_t flat_shard_size(int64_t total, int ranks) { return (total + ranks - 1) / ranks; }

// Rank `rank` of `ranks`'s partition of [0, total): [r·s, min((r+1)·s, total)), s = flat_shard_size
// (empty for trailing ranks when total is small).
inline FlatRange flat_partition(int64_t total, int rank, int ranks) {
  MT_CHECK(ranks > 0 && 0 <= rank && rank < ranks && total >= 0, "partition of rank {} of {}", rank, ranks);
  const int64_t s = flat_shard_size(total, ranks);
  return {std::min(rank * s, total), std::min((rank + 1) * s, total)};
}

}  // namespace megatrain
