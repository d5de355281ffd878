// Silent divergence between data-parallel replicas (docs/robustness.md R18; Megatron's
// check_param_hashes_across_dp_replicas): every health.replica_check_interval steps each rank takes
// the CRC-32 of every tensor it holds (no single flipped bit leaves it unchanged), the replicas of
// each optimizer group compare them (one all-gather per group over the group's own data-parallel
// communicator: the dense parameters over dp_cp, an MoE model's experts over edp_cp, the ranks that
// hold the same experts), then the world agrees (one all-reduce) whether any group differed. A
// replica that differs from its group's majority (with no majority, as with two replicas: all of
// them) — a flipped bit in memory, a bad core, a missed update — ends the run on every rank with
// ReplicaMismatch (exit code 75, so the resilient driver restarts from the last checkpoint):
// "REPLICA_MISMATCH step=S ranks=[R…] params=[NAME…]".
// Applies where the replicas hold the same values: float32 parameters at ZeRO stages 0–2, and
// 16-bit runs at stage 0; elsewhere it is off. A group with one replica (experts at edp = 1) has
// nothing to compare with. What is compared and what is not is said once at start-up.
#pragma once
#include <cstdint>
#include <vector>

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
  // One optimizer group the check compares.
  struct Compared {
    size_t group = 0;                  // in run.optim_groups()
    std::vector<size_t> tensors;       // the layout's tensors of the group
    std::vector<int32_t> world_ranks;  // its replicas' world ranks, in its communicator's order
  };
  // The group's tensors whose CRC-32 differs from its majority, and the ranks that hold them.
  void compare(const Compared& c, std::vector<int>& odd_ranks, std::vector<std::string>& odd_params);

  RankRun& run_;
  MemorySnapshots& snapshots_;
  int64_t interval_ = 0;  // 0 = off
  std::vector<Compared> compared_;
};

}  // namespace megatrain
