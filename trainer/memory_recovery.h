// Recovery from memory snapshots (docs/robustness.md R26; trainer/memory_snapshots.h): after a
// failure the relaunched job looks for the newest step for which its hosts together hold a committed
// snapshot of every rank. Each rank reads its own from its host's store; a rank whose host lost it
// (a replaced host) receives it over the network from a rank whose host holds the buddy's copy.
// Only snapshots of the same layout qualify (checkpoint/memory_store.h keys them by layout).
#pragma once
#include <optional>

#include "checkpoint/checkpoint_file.h"
#include "config/config.h"
#include "parallel/comm.h"

namespace megatrain {

// Collective. The newest complete set at step ≥ `at_least`, written into `t`, with rank 0 logging
// MEMORY_RESTORE (step, ranks read on their own host and fetched from a buddy's, bytes, seconds);
// nullopt when there is none (the caller then loads the storage checkpoint).
std::optional<CheckpointMeta> load_memory_snapshot(const Config& cfg, const CheckpointTensors& t, const Comm& world,
                                                   int64_t at_least);

}  // namespace megatrain
