// What happens around a training step besides the step itself (trainer/train.cpp run_training):
// health, faults, the replica check, metrics, checkpoints and evaluation watch each step through
// four calls, made to every observer in the order of the list:
//   begin(step)     before the step's first forward (steps numbered from 1)
//   updating(step)  before the update, or a roll back, changes the training state
//   updated(out)    after the update, or after the decision to skip it
//   end(out)        after the step, timed (out.seconds, out.comm)
#pragma once
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <vector>

#include "trainer/metrics.h"

namespace megatrain {

struct StepOutcome {
  int64_t step = 0;  // numbered from 1
  bool last = false;  // train.steps' last
  double loss = 0.0;  // mean over the global batch
  double lr = 0.0;
  double loss_scale = 1.0;
  bool updated = false;  // false: skipped (overflow, a spike)
  double norm = std::numeric_limits<double>::quiet_NaN();  // of the unscaled gradient, when updated
  std::chrono::steady_clock::time_point began;
  double seconds = 0.0;
  StepComm comm;

  // Step `step` of `steps`, beginning now.
  static StepOutcome beginning(int64_t step, int64_t steps) {
    StepOutcome out;
    out.step = step, out.last = step == steps, out.began = std::chrono::steady_clock::now();
    return out;
  }
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void begin(int64_t step) {}
  virtual void updating(int64_t step) {}
  virtual void updated(const StepOutcome& out) {}
  virtual void end(const StepOutcome& out) {}
};

class StepObservers {
 public:
  StepObservers(std::initializer_list<StepObserver*> list) : list_(list) {}
  void begin(int64_t step) const {
    for (StepObserver* o : list_) o->begin(step);
  }
  void updating(int64_t step) const {
    for (StepObserver* o : list_) o->updating(step);
  }
  void updated(const StepOutcome& out) const {
    for (StepObserver* o : list_) o->updated(out);
  }
  void end(const StepOutcome& out) const {
    for (StepObserver* o : list_) o->end(out);
  }

 private:
  std::vector<StepObserver*> list_;
};

}  // namespace megatrain
