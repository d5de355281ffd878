// Validation as a step observer: every train.eval_interval steps and after the last, the mean loss
// over the first eval_steps global batches of the validation set (RankRun::evaluate), into the
// run's result and the metrics.
#pragma once
#include <cstdint>

#include "health/progress.h"
#include "trainer/rank_run.h"
#include "trainer/step_log.h"
#include "trainer/step_observer.h"
#include "trainer/step_types.h"

namespace megatrain {

class Evaluation final : public StepObserver {
 public:
  Evaluation(const Config& cfg, RankRun& run, Progress& progress, StepLog& log, TrainResult& result)
      : cfg_(cfg), run_(run), progress_(progress), log_(log), result_(result) {}

  void end(const StepOutcome& out) override {
    const int64_t every = cfg_.train.eval_interval;
    if (!run_.data().valid() || every <= 0 || (out.step % every != 0 && !out.last)) return;
    progress_.enter(Section::eval, out.step);
    const double v = run_.evaluate();
    result_.val_losses.push_back(v);
    log_.validation(out.step, v);
  }

 private:
  const Config& cfg_;
  RankRun& run_;
  Progress& progress_;
  StepLog& log_;
  TrainResult& result_;
};

}  // namespace megatrain
