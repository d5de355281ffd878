#include "health/grad_nan_injector.h"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "kernels/ops.h"

namespace megatrain {

GradNanInjector::GradNanInjector(UnitState& inner, std::vector<FlatRange> units, const GradBuckets& buckets,
                                 const Stream& s)
    : inner_(inner), units_(std::move(units)), buckets_(buckets), stream_(s) {}

std::string GradNanInjector::arm(const std::string& element) {
  const int64_t first = units_.front().begin, last = units_.back().end - 1;
  armed_ = element == "first" ? first : element == "last" ? last : first + (last - first + 1) / 2;
  int unit = 0;
  while (units_[static_cast<size_t>(unit)].end <= armed_) ++unit;
  return fmt::format("element={} flat={} bucket={}/{}", element, armed_, buckets_.bucket_of(unit), buckets_.size());
}

void GradNanInjector::unit_grads_done(int unit) {
  const FlatRange u = units_[static_cast<size_t>(unit)];
  if (armed_ >= u.begin && armed_ < u.end) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    copy_from_host(stream_, Tensor(inner_.unit_grads(unit) + (armed_ - u.begin), Shape{1}).on(stream_.device), &nan);
    armed_ = -1;
  }
  inner_.unit_grads_done(unit);
}

}  // namespace megatrain
