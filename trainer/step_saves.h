// Checkpoints and stops as a step observer: a save every checkpoint.save_interval steps (skipped
// while an asynchronous one is still being written; the run's last waits for it), and after every
// step but the last the ranks' agreement on a stop request (trainer/stop_request.h), after which
// the run saves (unless it just did) and ends.
#pragma once
#include <cstdint>
#include <memory>

#include "health/progress.h"
#include "trainer/checkpoint.h"
#include "trainer/rank_run.h"
#include "trainer/run_state.h"
#include "trainer/step_observer.h"
#include "trainer/stop_request.h"
#include "trainer/step_types.h"

namespace megatrain {

class StepSaves final : public StepObserver {
 public:
  // Installs the stop signals' handlers; saves only with a checkpoint.dir.
  StepSaves(const Config& cfg, RankRun& run, const RunState& at, Progress& progress, TrainResult& result);
  // [Note: stale-synchronous step] (trainer/step_compute.h): the first step from `step` (0-based) on
  // after which no gradient reduction may be in flight: a periodic save, exit_after_steps' stop,
  // the run's last step.
  int64_t horizon(int64_t step) const;
  // A committed checkpoint exists to roll back to (loaded as "latest", or saved by this run).
  bool can_roll_back() const { return committed_; }
  // Before a rollback at step `step`: the save in flight is finished.
  void wait(int64_t step);
  void end(const StepOutcome& out) override;
  // After a step that is not the run's last: whether the ranks agreed to stop, saved if asked to
  // (collective over the world).
  bool stop(const StepOutcome& out);
  // After the last step: the checkpoint section; stale reductions dropped; the save in flight finished.
  void finish();

 private:
  bool is_save_step(int64_t step) const;  // a multiple of checkpoint.save_interval, with a checkpoint.dir
  bool save(int64_t step, Checkpointer::IfBusy if_busy);

  const Config& cfg_;
  RankRun& run_;
  const RunState& at_;
  Progress& progress_;
  TrainResult& result_;
  const int64_t start_step_;
  std::unique_ptr<Checkpointer> checkpointer_;  // with a folder to save to
  StopRequests stop_;
  bool committed_;
  bool saved_ = false;  // in the step that just ended
};

}  // namespace megatrain
