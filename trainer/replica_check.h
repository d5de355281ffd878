// Silent divergence between data-parallel replicas (docs/robustness.md R18; Megatron's
// check_param_hashes_across_dp_replicas): every health.replica_check_interval steps each rank takes
// the CRC-32 of every tensor it holds (no single flipped bit leaves it unchanged), the
// data-parallel replicas compare them (one all-gather), then the world agrees (one all-reduce)
// whether any group differed. A replica that differs from its group's majority (with no majority,
// as with two replicas: all of them) — a flipped bit in memory, a bad core, a missed update — ends
// the run on every rank with ReplicaMismatch (exit code 75, so the resilient driver restarts from
// the last checkpoint): "REPLICA_MISMATCH step=S ranks=[R…] params=[NAME…]".
// Applies where the replicas hold the same values: float32 parameters at ZeRO stages 0–2, and
// 16-bit runs at stage 0; elsewhere it is off, said once at start-up.
#pragma once
#include <cstdint>

#include "kernels/check.h"
#include "trainer/memory_snapshots.h"
#include "trainer/rank_run.h"
#include "trainer/step_observer.h"

namespace megatrain {

class ReplicaMismatch : public Error {
 public:
  using Error::Error;
};

class ReplicaCheck final : public StepObserver {
 public:
  // A mismatch discards `snapshots` (taken after the corruption began, they must not be restored).
  ReplicaCheck(const Config& cfg, RankRun& run, MemorySnapshots& snapshots);
  // After the update of step out.step (or its skip); collective over the world at each interval.
  void updated(const StepOutcome& out) override;

 private:
  RankRun& run_;
  MemorySnapshots& snapshots_;
  int64_t interval_ = 0;  // 0 = off
  std::vector<int32_t> dp_world_ranks_;
};

}  // namespace megatrain
