// RankRun's stale-synchronous step (parallel.max_staleness > 0).
//
// [Note: stale-synchronous step] With s = max_staleness the update of step k (0-based) is built
// from batch k's gradients, computed on the parameters after update k − s − 1: batch k + s is
// computed just before update k is applied, so up to s reductions are in flight while a rank
// computes (optim/zero_plan.h [Note: bounded staleness]). The first s steps after a start or a
// horizon compute their batches on the same parameters (a warm-up of s + 1 batches in the first
// step), and the s steps before a horizon compute none, so no reduction is in flight at a horizon:
// a checkpoint saved there holds no in-flight state, and a run resumed from it continues exactly
// as the uninterrupted run did (which drained at the same step). A step's loss sum and overflow
// key are reduced with its gradients, so no collective of the step waits for a slower peer before
// its update is due.
#include <algorithm>

#include "trainer/rank_run.h"

namespace megatrain {

double RankRun::stale_step(int64_t step, int64_t data_skip, int64_t horizon) {
  const int s = cfg.parallel.max_staleness;
  MT_CHECK(s > 0 && step < horizon, "stale_step({}) needs max_staleness > 0 and a horizon after it ({})", step,
           horizon);
  if (stale_.empty()) stale_next_ = step;
  const int64_t w = world.size(), r = world.rank();
  for (; stale_next_ <= std::min(step + s, horizon - 1); ++stale_next_) {
    StaleScalars& q = stale_.emplace_back();
    q.loss = forward_backward(stale_next_ + data_skip, 1.0);
    zero.defer_reduction();
    q.key = zero.local_nonfinite() ? 2 * w + (w - 1 - r) : 0;  // first_overflow's key for own gradients
    if (dp > 1) q.loss_work = dp_comm.all_reduce(&q.loss, 1);
    q.key_work = world.all_reduce(&q.key, 1, ReduceOp::max);
  }
  zero.retire_reduction();
  StaleScalars& q = stale_.front();
  q.loss_work.wait();
  q.key_work.wait();
  const double loss = q.loss / (data.train().micro_batches_per_step() * dp);
  stale_key_ = q.key;
  stale_.pop_front();
  return loss;
}

void RankRun::stale_discard() {
  zero.discard_reductions();
  for (const StaleScalars& q : stale_) {
    q.loss_work.wait();
    q.key_work.wait();
  }
  stale_.clear();
}

}  // namespace megatrain
