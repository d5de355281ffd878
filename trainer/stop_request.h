// Stopping a run early at a step boundary, after a save — for preemption and time limits
// (docs/robustness.md R11; Megatron's DistributedSignalHandler, --exit-duration-in-mins and
// --exit-interval). Three causes: SIGUSR1 or SIGTERM (Slurm's `--signal`), held until the step
// ends [Note: held stop signals]; train.exit_duration_mins of wall time since the run started;
// train.exit_after_steps steps of this run. After every step the ranks agree (one all-reduce of the
// three flags, max), so every rank stops after the same step even when only one rank was signalled
// or one rank's clock passed the limit first. The trainer then saves (checkpoint.dir) and exits
// with kExitStopped.
// A signal arriving while the run saves and exits changes nothing (the flag is already set).
// With parallel.max_staleness = s > 0 the all-reduce is not waited for: the flags agreed after a
// step are acted on s steps later, so a slower peer does not hold up every step (trainer/
// trainer/step_compute.h [Note: stale-synchronous step]); exit_after_steps, which every rank knows alike,
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

// [Note: held stop signals] A signal with a handler is delivered by pushing its frame (some 3 KB
// with the AVX-512 state) below the interrupted thread's stack pointer. oneDNN's JIT f32 GEMM
// kernels, which every CPU matmul calls (kernels/cpu/gemm.h), point the stack pointer into a heap
// workspace while they run (oneDNN issue 4845, fixed in 3.11; Debian 12 has 2.6): a stop signal that
// landed there wrote its frame over the heap — an abort in free() soon after, or silently changed
// data. So `train` holds SIGUSR1 and SIGTERM: hold_stop_signals() blocks them in the calling thread
// first thing in main, before MPI or any library starts a thread, so every thread inherits the
// block; a signal then stays pending, interrupts nothing, and StopRequests::agree takes it after
// the step. A thread that does not hold them (a caller that did not hold them first) still meets
// the handler, which only sets a flag.
void hold_stop_signals();

// The stop signals of one run: installs the SIGUSR1 and SIGTERM handler, for a thread that does not
// hold them (the previous handlers come back on destruction), and takes the held ones.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The first stop signal since construction, held or caught; 0 = none yet.
  int first() const;
};

class StopRequests {
 public:
  StopRequests(const Config& cfg, const Comm& world);
  ~StopRequests();
  StopRequests(const StopRequests&) = delete;
  StopRequests& operator=(const StopRequests&) = delete;

  // Collective over the world, after each step (takes a held stop signal): "" to go on, else why to
  // stop (the same on every rank): "signal SIGUSR1", "train.exit_duration_mins = 1.5",
  // "train.exit_after_steps = 100".
  std::string agree(int64_t steps_this_run);

 private:
  struct Pending {
    std::array<int64_t, 3> why{};
    Work work;
  };
  const Config& cfg_;
  Comm world_;
  StopSignals signals_;
  std::chrono::steady_clock::time_point start_;
  std::deque<Pending> pending_;  // agreements in flight, oldest first (at most max_staleness + 1)
};

}  // namespace megatrain
