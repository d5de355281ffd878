#include "optim/grad_pool.h"

namespace megatrain {

GradPool::GradPool(int buckets)
    : buffer_(static_cast<size_t>(buckets), -1), in_flight_(static_cast<size_t>(buckets), false) {}

void GradPool::release(int b) {
  const auto k = static_cast<size_t>(b);
  in_flight_[k] = false;
  if (buffer_[k] >= 0) free_.push_back(buffer_[k]);
  buffer_[k] = -1;
}

int64_t GradPool::floats() const {
  int64_t n = 0;
  for (const int64_t s : sizes_) n += s;
  return n;
}

int GradPool::take_free(int64_t n) {
  for (size_t k = 0; k < free_.size(); ++k) {
    const int id = free_[k];
    if (sizes_[static_cast<size_t>(id)] < n) continue;
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(k));
    return id;
  }
  return -1;
}

// Buckets are numbered from the highest units down, so the lowest number is the oldest.
int GradPool::oldest_in_flight() const {
  for (size_t b = 0; b < buffer_.size(); ++b)
    if (in_flight_[b] && buffer_[b] >= 0) return static_cast<int>(b);
  return -1;
}

GradPool::Taken GradPool::give(int b, int buffer, bool made) {
  buffer_[static_cast<size_t>(b)] = buffer;
  return {buffer, made};
}

}  // namespace megatrain
