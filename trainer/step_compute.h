// How a step's gradients and loss are computed, chosen once when the run is composed
// (make_step_compute) — the step loop (trainer/train.cpp) names neither:
//   SyncStep  — the step's own global batch through the pipeline schedule, its gradients reduced
//               before the update (RankRun::train_step);
//   StaleStep — bounded staleness, parallel.max_staleness = s > 0 ([Note: stale-synchronous step]).
// Faults that strike the computation (MEGATRAIN_FAULT nan, spike) wrap either (StepFaults::attach).
//
// [Note: stale-synchronous step] The update of step k (0-based) is built from batch k's gradients,
// computed on the parameters after update k − s − 1: batch k + s is computed just before update k is
// applied, so up to s reductions are in flight while a rank computes (optim/zero_plan.h [Note:
// bounded staleness]). The first s steps after a start or a horizon compute their batches on the
// same parameters (a warm-up of s + 1 batches in the first step), and the s steps before a horizon
// compute none, so no reduction is in flight at a horizon: a checkpoint saved there holds no
// in-flight state, and a run resumed from it continues exactly as the uninterrupted run did (which
// drained at the same step). A step's loss sum and overflow key are reduced with its gradients, so no
// collective of the step waits for a slower peer before its update is due.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "optim/clip.h"
#include "parallel/comm.h"

namespace megatrain {

class RankRun;
struct RunState;
struct Config;

class StepCompute {
 public:
  virtual ~StepCompute() = default;
  // Forward and backward of 0-based step `step`, the loss gradient multiplied by loss_scale (fp16);
  // the mean loss over the global batch. Its gradients are then the optimizer's.
  virtual double loss(int64_t step, double loss_scale) = 0;
  // Where this step's first Inf/NaN came from (optim/clip.h [Note: overflow origin]) on any rank;
  // `loss_nonfinite`: this rank's own loss.
  virtual Overflow first_overflow(bool loss_nonfinite) = 0;
  // Before the run ends: nothing left in flight (a stop between two horizons).
  virtual void finish() {}
};

// `horizon(step)`: the next step at which no reduction may be in flight (a save, the run's end).
std::unique_ptr<StepCompute> make_step_compute(const Config& cfg, RankRun& run, const RunState& at,
                                               std::function<int64_t(int64_t)> horizon);

}  // namespace megatrain
