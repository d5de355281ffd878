// Loss-spike detection (docs/robustness.md R17; Megatron's check against a multiple of the loss
// reference, PaLM's skipping): a step's loss (the global mean, the same on every rank, so every
// rank decides alike) at or above health.spike_factor × the median of the last health.spike_window
// accepted losses (at least 10 of them) is a spike, logged as
//   LOSS_SPIKE step=S value=V ref=R policy=warn|skip|rollback
// With health.on_spike = "skip" the step's update is skipped (counted in skipped_steps, the LR
// schedule does not advance, the data is still consumed); "rollback" goes back to the last
// checkpoint and skips data past it (trainer/train.cpp roll_back); "warn" only logs. A spike's loss
// does not enter the reference.
#pragma once
#include <cstdint>
#include <deque>

#include "health/health_options.h"

namespace megatrain {

class LossSpikes {
 public:
  explicit LossSpikes(const HealthOptions& opts) : opts_(opts) {}
  // Whether `loss` at step `step` is a spike (logged on rank 0 when `log`); a loss that is not
  // becomes part of the reference.
  bool check(int64_t step, double loss, bool log);
  // The reference now: the median of the window (0 until it holds 10 losses).
  double reference() const;

 private:
  HealthOptions opts_;
  std::deque<double> window_;
};

}  // namespace megatrain
