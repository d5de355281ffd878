// Memory snapshots (docs/robustness.md R26; Gemini keeps checkpoints in peer hosts' CPU memory):
// every checkpoint.memory_interval steps, right after the update, each rank encodes its whole
// training state (checkpoint/memory_snapshot.h) into its host's memory store
// (checkpoint/memory_store.h) and sends a copy to its buddy — the rank with the same local index on
// the next host (memory_buddy) — which stores it on its own host, so every rank's state is on two
// hosts and no host holds only its own. An all-reduce then tells every rank whether every copy was
// written; only then does each commit the step on its host, so a half-written set is never used, and
// the next prune removes it. Storage checkpoints go on as configured (less often).
// The copy and the exchange run inside the step (their time is in step_time_ms); overlapping them
// with the next step's compute is not done yet.
#pragma once
#include <optional>

#include "checkpoint/memory_store.h"
#include "trainer/rank_run.h"
#include "trainer/run_state.h"
#include "trainer/step_observer.h"

namespace megatrain {

// The memory store of this rank's host for `cfg`'s run at the layout of `world`: checkpoint.memory_dir,
// or /dev/shm/megatrain/<checkpoint.dir as one name>; the host is host_name(), or vnodeN with
// MEGATRAIN_RANKS_PER_NODE (virtual hosts on one machine).
MemoryStore memory_store_for(const Config& cfg, const Comm& world);
// The rank holding `rank`'s copy: rank + ranks per host, modulo the world; -1 on one host.
int memory_buddy(int rank, int world);
// The rank whose copy `rank` holds (memory_buddy's inverse); -1 on one host.
int memory_ward(int rank, int world);

class MemorySnapshots final : public StepObserver {
 public:
  MemorySnapshots(const Config& cfg, RankRun& run, const RunState& at);
  void updated(const StepOutcome& out) override;

 private:
  const Config& cfg_;
  RankRun& run_;
  const RunState& at_;
  std::optional<MemoryStore> store_;  // none when memory snapshots are off
  bool logged_ = false;
};

}  // namespace megatrain
