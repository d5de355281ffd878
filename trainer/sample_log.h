// The sample log (log.samples_file; docs/robustness.md R26): one JSON line per training step naming
// what the step trained on — the global batch's index, its sample count and a digest of its samples
// — so that a run that went through recoveries or a change of layout can be checked against a
// fault-free run's log: no sample skipped, none repeated, none in another step.
//
// Each line's digest is the batch's (trainer/sample_digest.h). The ranks of
// the last pipeline stage with tensor- and context-parallel rank 0 read each sample once; the sums
// meet in one all-reduce of the two 32-bit halves (exact in int64). Like the metrics file, a resumed
// run keeps the lines through its step and appends: the log is what the final model trained on.
#pragma once
#include <cstdint>

#include "trainer/metrics.h"
#include "trainer/sample_digest.h"
#include "trainer/step_observer.h"

namespace megatrain {

class RankRun;
struct RunState;
struct Config;

class SampleLog final : public StepObserver {
 public:
  SampleLog(const Config& cfg, RankRun& run, const RunState& at);
  void end(const StepOutcome& out) override;  // collective when log.samples_file is set
  // A rollback to the checkpoint of step `step`: drops the lines after it.
  void rewind(int64_t step) { rows_.rewind(step); }

 private:
  RankRun& run_;
  const RunState& at_;
  bool on_;            // log.samples_file is set
  StepRowsFile rows_;  // rank 0's
};

}  // namespace megatrain
