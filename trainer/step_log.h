// The step metrics (trainer/metrics.h) as a step observer: each step's loss and gradient norm into
// the run's result, memory and the start-up times after the first step, and every log.interval
// steps (and the last) one line of averages over the steps since the last: step and iteration time
// (trainer/metrics.h), tokens/s, MFU (trainer/mfu_peak.h), communication by group, memory, MoE routing.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>

#include "trainer/metrics.h"
#include "trainer/mfu_peak.h"
#include "trainer/rank_run.h"
#include "trainer/run_state.h"
#include "trainer/step_observer.h"
#include "trainer/step_types.h"

namespace megatrain {

class StepLog final : public StepObserver {
 public:
  // Measures the MFU peak (collective when "auto"); `at`: the run's state from the first step on.
  StepLog(const Config& cfg, RankRun& run, const RunState& at, TrainResult& result);
  // A rollback to the checkpoint of step `step`: drops the rows after it.
  void rewind(int64_t step);
  void validation(int64_t step, double loss) { log_.validation(step, loss); }
  // A step's model FLOPs per rank at the MFU peak, in seconds (the watchdog's first-step
  // prediction); 0 without a peak.
  double seconds_at_peak() const;
  void begin(int64_t step) override;
  void end(const StepOutcome& out) override;

 private:
  // Summed over the steps since the last log line.
  struct Logged {
    double time = 0.0, iteration = 0.0;
    int64_t steps = 0, tokens = 0;  // tokens: of the steps' global batches (a batch ramp's grow)
    StepComm comm;
  };
  StepMetrics averages(const StepOutcome& out);

  const Config& cfg_;
  RankRun& run_;
  const RunState& at_;
  TrainResult& result_;
  const int64_t first_step_;
  const double flops_per_step_;
  MfuPeak peak_;
  MetricsLog log_;
  Logged logged_;
  const std::chrono::steady_clock::time_point start_;
  std::optional<std::chrono::steady_clock::time_point> last_end_;  // the previous step's log point
};

}  // namespace megatrain
