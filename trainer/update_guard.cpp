#include "trainer/update_guard.h"

#include <spdlog/spdlog.h>

#include "trainer/step_types.h"

namespace megatrain {

Verdict UpdateGuard::judge(int64_t step, double loss, bool can_roll_back) {
  if (!spikes_.check(step, loss, rank0_)) return Verdict::update;
  const std::string& on_spike = cfg_.health.on_spike;
  if (on_spike == "rollback" && can_roll_back) return Verdict::roll_back;
  if (on_spike == "rollback" && rank0_)
    spdlog::warn("LOSS_SPIKE step={}: no checkpoint saved yet to roll back to; the update is skipped", step);
  return on_spike == "warn" ? Verdict::update : Verdict::skip;
}

void UpdateGuard::count(int64_t step, const Overflow& overflow, bool updated, double scale, RunState& at) {
  if (!updated) ++at.skipped;
  const bool nonfinite = overflow.rank >= 0;
  if (at.scaler) {
    at.scaler->update(nonfinite);
    if (nonfinite && rank0_)
      spdlog::warn("step {} skipped: gradients overflowed (Inf/NaN, first seen on rank {}) at loss scale {:g}; "
                   "scale now {:g}",
                   step, overflow.rank, scale, at.scaler->scale());
    return;
  }
  nonfinite_in_a_row_ = nonfinite ? nonfinite_in_a_row_ + 1 : 0;
  if (nonfinite && rank0_)
    spdlog::warn("NONFINITE step={} origin_rank={} where={} skipped={}/{}: Inf/NaN, the update is skipped", step,
                 overflow.rank, overflow.where, nonfinite_in_a_row_, cfg_.train.max_consecutive_skips);
  if (nonfinite_in_a_row_ == cfg_.train.max_consecutive_skips)
    throw NonFiniteSteps(fmt::format(
        "{} steps in a row (to step {}) had Inf/NaN gradients (first seen on rank {}): training has diverged; "
        "resume from an earlier checkpoint with a lower optimizer.lr, or raise train.max_consecutive_skips",
        nonfinite_in_a_row_, step, overflow.rank));
}

}  // namespace megatrain
