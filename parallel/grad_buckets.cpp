#include "parallel/grad_buckets.h"

#include <algorithm>

namespace megatrain {

GradBuckets::GradBuckets(const std::vector<FlatRange>& units, int64_t bucket_floats, const std::vector<int>& breaks) {
  MT_CHECK(!units.empty() && bucket_floats >= 1, "GradBuckets: {} units, bucket of {} floats", units.size(),
           bucket_floats);
  for (size_t u = 1; u < units.size(); ++u)
    MT_CHECK(units[u].begin == units[u - 1].end, "GradBuckets: unit {} does not follow unit {}", u, u - 1);
  bucket_of_.resize(units.size());
  int last = static_cast<int>(units.size()) - 1;
  for (int u = last; u >= 0; --u) {
    const bool close = u == 0 || std::find(breaks.begin(), breaks.end(), u) != breaks.end() ||
                       units[static_cast<size_t>(last)].end - units[static_cast<size_t>(u)].begin >= bucket_floats;
    if (!close) continue;
    buckets_.push_back({FlatRange{units[static_cast<size_t>(u)].begin, units[static_cast<size_t>(last)].end}, u, last});
    for (int k = u; k <= last; ++k) bucket_of_[static_cast<size_t>(k)] = static_cast<int>(buckets_.size()) - 1;
    last = u - 1;
  }
}

int64_t GradBuckets::max_floats() const {
  int64_t m = 0;
  for (const GradBucket& b : buckets_) m = std::max(m, b.range.size());
  return m;
}

}  // namespace megatrain
