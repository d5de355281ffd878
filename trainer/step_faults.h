// MEGATRAIN_FAULT's faults that strike a training step (health/fault_plan.h): at its start (kill,
// hang, slow, exc, an extra collective, the random ones), NaN in this rank's loss or gradients
// (all of them through a NaN loss scale, or one element), a loss spike in the data, and a flipped
// bit in a parameter after the update. The step's own faults wrap its computation (attach), so the
// step loop names none.
#pragma once
#include <cstdint>
#include <memory>

#include "health/fault_plan.h"
#include "trainer/rank_run.h"
#include "trainer/step_compute.h"
#include "trainer/step_observer.h"

namespace megatrain {

class StepFaults final : public StepObserver {
 public:
  StepFaults(const Config& cfg, RankRun& run, FaultPlan& faults) : cfg_(cfg), run_(run), faults_(faults) {}

  void begin(int64_t step) override;
  void updated(const StepOutcome& out) override;
  // `compute` with this step's faults: NaN gradients (a NaN loss scale), a NaN loss (in the
  // overflow check), a spike in the loss of the batch it strikes. `at`: the run's data skip.
  std::unique_ptr<StepCompute> attach(std::unique_ptr<StepCompute> compute, const RunState& at);

  // The loss scale the step's backward uses: NaN when this step's gradients are to be NaN.
  double grad_scale(double scale) const;
  // Whether this rank's loss is to be NaN this step.
  bool loss_nonfinite() const { return nan_ && nan_->detail == "loss"; }
  // The loss of the step `step` that trains on global batch `batch` (both from 1), after a spike.
  double on_loss(int64_t step, int64_t batch, double loss) const;

 private:
  const Config& cfg_;
  RankRun& run_;
  FaultPlan& faults_;
  const Fault* nan_ = nullptr;  // this step's
};

}  // namespace megatrain
