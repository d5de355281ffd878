#include "health/median.h"

#include <algorithm>
#include <cstddef>

namespace megatrain {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto mid = static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[static_cast<size_t>(mid)];
  return v.size() % 2 == 1 ? upper : (upper + *std::max_element(v.begin(), v.begin() + mid)) / 2.0;
}

}  // namespace megatrain
