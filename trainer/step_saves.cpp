#include "trainer/step_saves.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "checkpoint/checkpoint_dir.h"

namespace megatrain {

StepSaves::StepSaves(const Config& cfg, RankRun& run, const RunState& at, Progress& progress, TrainResult& result)
    : cfg_(cfg),
      run_(run),
      at_(at),
      progress_(progress),
      result_(result),
      start_step_(at.step),
      checkpointer_(cfg.checkpoint.dir.empty() ? nullptr : std::make_unique<Checkpointer>(cfg, run.world())),
      stop_(cfg, run.world()),
      committed_(at.from_latest) {}

int64_t StepSaves::horizon(int64_t step) const {
  int64_t h = cfg_.train.steps;
  const int64_t every = cfg_.checkpoint.save_interval;
  if (checkpointer_ && every > 0) h = std::min(h, (step / every + 1) * every);
  if (cfg_.train.exit_after_steps > 0) h = std::min(h, start_step_ + cfg_.train.exit_after_steps);
  return h;
}

void StepSaves::wait(int64_t step) {
  progress_.enter(Section::checkpoint, step);
  checkpointer_->wait();
}

bool StepSaves::save(int64_t step, Checkpointer::IfBusy if_busy) {
  progress_.enter(Section::checkpoint, step);
  // Taken now: on a device, the host copy of this step's state (rank_run.h [Note: a run on a device]).
  const bool done = checkpointer_->save([&] { return run_.checkpoint_tensors(); },
                                        at_.saved(step, cfg_, run_.data().train().sizes()), if_busy);
  committed_ = committed_ || done;
  return done;
}

bool StepSaves::is_save_step(int64_t step) const {
  const int64_t every = cfg_.checkpoint.save_interval;
  return checkpointer_ && every > 0 && step % every == 0;
}

void StepSaves::end(const StepOutcome& out) {
  saved_ = is_save_step(out.step) &&
           save(out.step, out.last ? Checkpointer::IfBusy::wait : Checkpointer::IfBusy::skip);
}

bool StepSaves::stop(const StepOutcome& out) {
  const std::string why = stop_.agree(out.step - start_step_);
  if (why.empty()) return false;
  spdlog::warn("STOP_REQUESTED step={} reason={}: {}", out.step, why,
               checkpointer_ ? "saving, then exiting with code 10" : "checkpoint.dir is empty: exiting unsaved");
  if (checkpointer_ && !saved_) save(out.step, Checkpointer::IfBusy::wait);
  result_.stopped_at = out.step;
  return true;
}

void StepSaves::finish() {
  progress_.enter(Section::checkpoint, progress_.step());
  if (!checkpointer_) return;
  // Restored from memory at the last step (the launch before died during or before the last save):
  // no step runs, so the last step's checkpoint is written here, as the step would have.
  const int64_t last = cfg_.train.steps;
  if (at_.from_memory && start_step_ == last && is_save_step(last)) {
    const std::vector<int64_t> stored = committed_steps(cfg_.checkpoint.dir);
    if (std::find(stored.begin(), stored.end(), last) == stored.end()) {
      spdlog::info("restored step {} from memory, the last: writing its checkpoint", last);
      save(last, Checkpointer::IfBusy::wait);
    }
  }
  checkpointer_->wait();
}

}  // namespace megatrain
