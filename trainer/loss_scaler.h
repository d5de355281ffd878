// Dynamic loss scaling for fp16 training (Micikevicius et al. 2018), with Megatron-LM's
// DynamicGradScaler semantics and DeepSpeed's stop at the minimum scale:
//   the loss gradient is multiplied by scale(); a step whose gradients hold an Inf or NaN on any
//   rank is skipped (no optimizer update) and counts against the hysteresis: after `hysteresis`
//   overflowing steps without a scale increase between them, the scale is multiplied by
//   backoff_factor (not below min_scale); after growth_interval consecutive clean steps it is
//   multiplied by growth_factor and the hysteresis is restored.
// [Note: collapse] An overflow that would lower a scale already at min_scale means the gradients
// are not finite at any allowed scale; Megatron would clamp and skip every step from then on
// (DeepSpeed issue #1599 is that failure mode), so update() throws instead.
#pragma once
#include <cstdint>

#include "config/config.h"

namespace megatrain {

// What a checkpoint stores so a resumed run scales exactly as the uninterrupted one.
struct LossScaleState {
  double scale = 0.0;  // 0: no loss scaling (fp32, bf16)
  int64_t growth_tracker = 0, hysteresis_tracker = 0;
  friend bool operator==(const LossScaleState&, const LossScaleState&) = default;
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScaleOptions& opt);
  double scale() const { return state_.scale; }
  // After each step: overflow = some rank saw Inf/NaN. Throws megatrain::Error at [Note: collapse].
  void update(bool overflow);
  const LossScaleState& state() const { return state_; }
  void restore(const LossScaleState& s) { state_ = s; }

 private:
  LossScaleOptions opt_;
  LossScaleState state_;
};

}  // namespace megatrain
