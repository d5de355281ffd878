// Whether a step's update goes ahead: a loss spike (health.on_spike: warn, skip the update, or roll
// back to the last checkpoint) and Inf/NaN gradients on any rank (fp16: the loss scaler backs off;
// fp32 and bf16: the update is skipped, and train.max_consecutive_skips in a row end the run with
// NonFiniteSteps).
#pragma once
#include <cstdint>

#include "config/config.h"
#include "health/loss_spikes.h"
#include "optim/clip.h"
#include "trainer/run_state.h"

namespace megatrain {

enum class Verdict { update, skip, roll_back };

class UpdateGuard {
 public:
  UpdateGuard(const Config& cfg, bool rank0) : cfg_(cfg), rank0_(rank0), spikes_(cfg.health) {}
  // The step's loss against the recent ones; `can_roll_back`: a committed checkpoint exists.
  Verdict judge(int64_t step, double loss, bool can_roll_back);
  // After the update (or its skip): the loss scaler, or the count of skipped steps in a row;
  // a skipped update is counted in at.skipped.
  void count(int64_t step, const Overflow& overflow, bool updated, double scale, RunState& at);

 private:
  const Config& cfg_;
  bool rank0_;
  LossSpikes spikes_;
  int64_t nonfinite_in_a_row_ = 0;
};

}  // namespace megatrain
