// Memory snapshots (docs/robustness.md R26; Gemini keeps checkpoints in peer hosts' CPU memory):
// every checkpoint.memory_interval steps, right after the update, each rank encodes its share of the
// training state — its ZeRO partition (checkpoint/memory_snapshot.h) — into its host's memory store
// (checkpoint/memory_store.h) and sends a copy to its buddy — the rank with the same local index on
// the next host (memory_buddy) — which stores it on its own host, so every rank's state is on two
// hosts and no host holds only its own. An all-reduce then tells every rank whether every copy was
// written; only then does each commit the step on its host, so a half-written set is never used, and
// the next prune removes it. Storage checkpoints go on as configured (less often).
// Nothing of it is on the step: a thread copies the rank's state into the file that keeps it, mapped
// (no buffer; the CRC-32 taken as it goes), while the next step computes — the state is not changed
// before that step's update, which waits for the copy (updating) — then sends it to the buddy (which
// receives it straight into its own file) and commits, on a communicator of its own. A snapshot that
// finds the previous one still in flight waits for it. What the steps waited, and what the copies cost
// the thread, is logged when the run ends.
#pragma once
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/memory_snapshot.h"
#include "checkpoint/memory_store.h"
#include "trainer/rank_run.h"
#include "trainer/run_state.h"
#include "trainer/step_observer.h"

namespace megatrain {

class MemorySnapshots final : public StepObserver {
 public:
  // Collective over the run's world when memory snapshots are on (the thread's communicator).
  MemorySnapshots(const Config& cfg, RankRun& run, const RunState& at);
  ~MemorySnapshots() override;  // waits for the snapshot in flight
  MemorySnapshots(const MemorySnapshots&) = delete;
  MemorySnapshots& operator=(const MemorySnapshots&) = delete;
  void updating(int64_t step) override;  // waits for the copy in flight
  void updated(const StepOutcome& out) override;
  // Collective. Waits for the snapshot in flight and removes this host's snapshots, of every layout
  // (`why`: a replica mismatch, whose restart must load from storage; the end of the run).
  void discard(const std::string& why);
  // The run has ended (finished, or stopped after its save): frees the host's memory of them.
  void finish() { discard("the run ended"); }

 private:
  // What the snapshots cost: the steps' waits (main thread), the copies and stores (the thread's,
  // read after it is joined).
  struct Cost {
    int64_t taken = 0;
    double waited_ms = 0.0, most_waited_ms = 0.0, copy_ms = 0.0, store_ms = 0.0;
    std::vector<double> cpu_ms;  // per snapshot: the first ones also create their files
  };
  void waited(std::chrono::steady_clock::time_point since);
  // On the thread: copies the state into own_ (none when it cannot be written; ckpt_slow delays it).
  void copy(int64_t step, const CheckpointTensors& state, const SnapshotHeader& header);
  // On the thread: exchanges own_ with the buddies, agrees, commits, prunes.
  void store(int64_t step);
  bool exchange(int64_t step, int to, int from, int64_t& received);
  void log_first(int64_t own_bytes, int64_t copy_bytes) const;
  void log_cost() const;

  const Config& cfg_;
  RankRun& run_;
  const RunState& at_;
  std::optional<MemoryStore> store_;  // none when memory snapshots are off
  std::optional<Comm> comm_;          // the thread's duplicate of the world
  std::optional<MemoryStore::Writing> own_;  // the snapshot in flight, written in its file in place
  std::thread worker_;
  std::future<void> copied_;  // the copy in flight
  Cost cost_;
};

}  // namespace megatrain
