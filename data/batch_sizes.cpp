#include "data/batch_sizes.h"

#include <algorithm>

#include "kernels/check.h"

namespace megatrain {

BatchSizes::BatchSizes(int64_t global) : global_(global) {
  MT_CHECK(global >= 1, "a global batch of {} samples", global);
  runs_.push_back({0, 0, global});
}

BatchSizes::BatchSizes(int64_t global, BatchRamp ramp) : global_(global) {
  MT_INPUT_CHECK(ramp.start >= 1 && ramp.start < global && ramp.increment >= 1 &&
                     (global - ramp.start) % ramp.increment == 0 && ramp.samples >= 1,
                 "a batch ramp from {} by {} over {} samples to a global batch of {}: it needs 0 < start < global "
                 "batch, an increment > 0 that divides global − start, and samples ≥ 1",
                 ramp.start, ramp.increment, ramp.samples, global);
  const double per_increment =
      static_cast<double>(ramp.samples) / static_cast<double>((global - ramp.start) / ramp.increment);
  // Megatron's update(consumed), step by step: the size is a function of the consumed samples.
  int64_t batch = 0, consumed = 0;
  while (consumed <= ramp.samples) {
    const auto steps = static_cast<int64_t>(static_cast<double>(consumed) / per_increment);
    const int64_t size = ramp.start + steps * ramp.increment;
    MT_CHECK(size <= global, "ramp size {} past the global batch {}", size, global);  // Megatron asserts it too
    if (runs_.empty() || runs_.back().size != size) runs_.push_back({batch, consumed, size});
    ++batch, consumed += size;
  }
  if (runs_.back().size != global) runs_.push_back({batch, consumed, global});
}

const BatchSizes::Run& BatchSizes::run_of(int64_t batch) const {
  MT_CHECK(batch >= 0, "batch {}", batch);
  const auto after =
      std::upper_bound(runs_.begin(), runs_.end(), batch, [](int64_t b, const Run& r) { return b < r.first_batch; });
  return *(after - 1);
}

int64_t BatchSizes::size(int64_t batch) const { return run_of(batch).size; }

int64_t BatchSizes::first_sample(int64_t batch) const {
  const Run& r = run_of(batch);
  return r.first_sample + (batch - r.first_batch) * r.size;
}

std::optional<int64_t> BatchSizes::batch_starting_at(int64_t samples) const {
  if (samples < 0) return std::nullopt;
  const auto after =
      std::upper_bound(runs_.begin(), runs_.end(), samples, [](int64_t s, const Run& r) { return s < r.first_sample; });
  const Run& r = *(after - 1);
  if ((samples - r.first_sample) % r.size != 0) return std::nullopt;
  return r.first_batch + (samples - r.first_sample) / r.size;
}

std::vector<int64_t> BatchSizes::sizes() const {
  std::vector<int64_t> out;
  for (const Run& r : runs_) out.push_back(r.size);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace megatrain
