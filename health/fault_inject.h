// Carrying out the faults of a FaultPlan (health/fault_plan.h) at the trainer's injection points.
// Each logs FAULT_INJECTED before it acts.
#pragma once
#include <cstdint>

#include "health/fault_plan.h"
#include "parallel/comm.h"

namespace megatrain {

// At the start of step `step` (0 = before training starts): slow (sleep), kill (a signal to
// itself), hang (sigstop, spin or sleep: never returns; freeze: returns, and a thread stops the
// process inside the next collective it waits in) and exc (throws megatrain::Error).
void inject_at_step_start(const FaultPlan& plan, int rank, int64_t step);

// exc with extra_collective=1 at the start of step `step`: one all-reduce (3 × i32) over `world`
// that the other ranks do not issue, so every later collective pairs with the wrong one (a desync,
// docs/robustness.md R02).
void inject_extra_collective(const FaultPlan& plan, const Comm& world, int64_t step);

// While saving the checkpoint of step `step`, at `phase` (mid_shard_write,
// after_shard_before_commit, after_commit_before_latest): a matching ckpt_crash kills the process
// with SIGKILL.
void inject_checkpoint_crash(const FaultPlan& plan, int rank, int64_t step, const char* phase);

// ckpt_slow: sleeps its ms (once per checkpoint write or memory snapshot).
void inject_checkpoint_delay(const FaultPlan& plan, int rank, int64_t step);

}  // namespace megatrain
