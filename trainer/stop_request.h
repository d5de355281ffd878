// Stopping a run early at a step boundary, after a save — for preemption and time limits
// (docs/robustness.md R11; Megatron's DistributedSignalHandler, --exit-duration-in-mins and
// --exit-interval). Three causes: SIGUSR1 or SIGTERM (Slurm's `--signal`), whose handlers only set
// a flag; train.exit_duration_mins of wall time since the run started; train.exit_after_steps
// steps of this run. After every step the ranks agree (one all-reduce of the three flags, max), so
// every rank stops after the same step even when only one rank was signalled or one rank's clock
// passed the limit first. The trainer then saves (checkpoint.dir) and exits with kExitStopped.
// A signal arriving while the run saves and exits changes nothing (the flag is already set).
// With parallel.max_staleness = s > 0 the all-reduce is not waited for: the flags agreed after a
// step are acted on s steps later, so a slower peer does not hold up every step (trainer/
// rank_run.h [Note: stale-synchronous step]); exit_after_steps, which every rank knows alike,
// still acts at once.
#pragma once
#include <array>
#include <chrono>
#include <deque>
#include <cstdint>
#include <string>

#include "parallel/comm.h"
#include "config/config.h"
#include "health/exit_codes.h"

namespace megatrain {

class StopRequests {
 public:
  // Installs the SIGUSR1 and SIGTERM handlers (the previous ones come back on destruction).
  StopRequests(const Config& cfg, const Comm& world);
  ~StopRequests();
  StopRequests(const StopRequests&) = delete;
  StopRequests& operator=(const StopRequests&) = delete;

  // Collective over the world, after each step: "" to go on, else why to stop (the same on every
  // rank): "signal SIGUSR1", "train.exit_duration_mins = 1.5", "train.exit_after_steps = 100".
  std::string agree(int64_t steps_this_run);

 private:
  struct Pending {
    std::array<int64_t, 3> why{};
    Work work;
  };
  const Config& cfg_;
  Comm world_;
  std::chrono::steady_clock::time_point start_;
  std::deque<Pending> pending_;  // agreements in flight, oldest first (at most max_staleness + 1)
};

}  // namespace megatrain
