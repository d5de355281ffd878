#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace megatrain {

double LrSchedule::at(int64_t t) const {
  if (warmup_steps > 0 && t <= warmup_steps)
    return lr_max * static_cast<double>(t) / static_cast<double>(warmup_steps);
  if (decay == DecayKind::constant) return lr_max;
  if (decay == DecayKind::wsd) {
    const int64_t anneal = decay_steps - wsd_decay_steps;  // the last step at lr_max
    if (t <= anneal) return lr_max;
    const double q = std::min(1.0, static_cast<double>(t - anneal) / static_cast<double>(wsd_decay_steps));
    const double c = wsd_shape == WsdShape::linear        ? 1.0 - q
                     : wsd_shape == WsdShape::cosine      ? 0.5 * (1.0 + std::cos(std::numbers::pi * q))
                     : wsd_shape == WsdShape::exponential ? 2.0 * std::pow(0.5, q) - 1.0
                                                          : 1.0 - std::sqrt(q);
    return lr_min + (lr_max - lr_min) * c;
  }
  const int64_t span = decay_steps - warmup_steps;
  const double p = span <= 0 ? 1.0 : std::min(1.0, static_cast<double>(t - warmup_steps) / static_cast<double>(span));
  if (decay == DecayKind::linear) return lr_max - (lr_max - lr_min) * p;
  return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

LrSchedule lr_schedule_of(const OptimizerConfig& o, const BatchSizes& sizes) {
  const int64_t decay = sizes.first_sample(o.decay_steps);
  const int64_t wsd = o.wsd_decay_steps > 0 ? decay - sizes.first_sample(o.decay_steps - o.wsd_decay_steps) : 0;
  return {o.lr, o.min_lr, sizes.first_sample(o.warmup_steps), decay, o.decay, wsd, o.wsd_decay_style};
}

}  // namespace megatrain
