// Gradient buckets: the flat gradient range split into a few contiguous pieces, each reduced
// across data-parallel ranks as one operation as soon as backward has produced all of it.
//
// Buckets are built from the model's units (model/unit_state.h), which backward completes in
// decreasing order: walking the units from the last down, a bucket closes once it holds at least
// `bucket_floats` floats (a unit is never split, so one large unit may make a larger bucket).
// Bucket 0 therefore holds the highest units and is reduced first. A bucket also closes at each
// of `breaks` (unit indices starting a group: the model chunks of an interleaved pipeline, whose
// backwards run apart), so no bucket spans two groups. Invariant: the buckets tile
// [units.front().begin, units.back().end) without gaps, each is a union of consecutive units, and
// bucket_of(u) is the one that contains unit u.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/flat_range.h"

namespace megatrain {

struct GradBucket {
  FlatRange range;
  int first_unit = 0, last_unit = 0;  // units [first_unit, last_unit] (inclusive)
  int num_units() const { return last_unit - first_unit + 1; }
};

class GradBuckets {
 public:
  // units: contiguous, in increasing order; bucket_floats ≥ 1.
  GradBuckets(const std::vector<FlatRange>& units, int64_t bucket_floats, const std::vector<int>& breaks = {});

  int size() const { return static_cast<int>(buckets_.size()); }
  const GradBucket& operator[](int b) const { return buckets_[static_cast<size_t>(b)]; }
  int bucket_of(int unit) const { return bucket_of_[static_cast<size_t>(unit)]; }
  int64_t max_floats() const;  // the largest bucket

 private:
  std::vector<GradBucket> buckets_;
  std::vector<int> bucket_of_;  // per unit
};

}  // namespace megatrain
