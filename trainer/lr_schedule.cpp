#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>


namespace megatrain {

double LrSchedule::at(int64_t t) const {
  if (warmup_steps > 0 && t <= warmup_steps)
    return lr_max * static_cast<double>(t) / static_cast<double>(warmup_steps);
  if (decay == DecayKind::constant) return lr_max;
  const int64_t span = decay_steps - warmup_steps;
  const double p = span <= 0 ? 1.0 : std::min(1.0, static_cast<double>(t - warmup_steps) / static_cast<double>(span));
  if (decay == DecayKind::linear) return lr_max - (lr_max - lr_min) * p;
  return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace megatrain
