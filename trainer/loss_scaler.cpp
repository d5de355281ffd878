#include "trainer/loss_scaler.h"

#include <algorithm>

#include "kernels/check.h"

namespace megatrain {

DynamicLossScaler::DynamicLossScaler(const LossScaleOptions& opt)
    : opt_(opt), state_{opt.initial_scale, 0, opt.hysteresis} {}

void DynamicLossScaler::update(bool overflow) {
  if (!overflow) {
    if (++state_.growth_tracker == opt_.growth_interval) {
      state_.growth_tracker = 0;
      state_.hysteresis_tracker = opt_.hysteresis;
      state_.scale *= opt_.growth_factor;
    }
    return;
  }
  state_.growth_tracker = 0;
  if (--state_.hysteresis_tracker > 0) return;
  if (state_.scale <= opt_.min_scale)
    throw Error(fmt::format(
        "fp16 loss scale collapsed: gradients overflowed (Inf/NaN) {} time(s) in a row at the minimum scale {} "
        "(loss_scale.min_scale), so no allowed scale gives finite gradients; the run stops instead of skipping every "
        "step. Lower optimizer.lr, train in bf16 (train.precision = \"bf16\"), or resume from an earlier checkpoint",
        opt_.hysteresis, opt_.min_scale));
  state_.scale = std::max(state_.scale * opt_.backoff_factor, opt_.min_scale);
}

}  // namespace megatrain
