// Recovery from memory snapshots (docs/robustness.md R26; trainer/memory_snapshots.h): after a
// failure the relaunched job looks for the newest step for which its hosts together hold a committed
// snapshot of every rank. A snapshot holds the rank's ZeRO partition, so each rank restores from the
// snapshots of its dp group — its dp_cp group with context parallelism — (the ranks that held its
// view of the model): those its host holds, and
// the others received over the network from a rank whose host holds them (a buddy's copy when a host
// was replaced). Elastic continuation: a job relaunched on fewer hosts, or more, at another dp or
// cp (the same tp, ep and pp) restores the old layout's set the same way — each rank takes the snapshots
// of the old ranks that held its view and fills its new partition from them
// (checkpoint/memory_snapshot.h restore_snapshots). A set that cannot be restored (a damaged
// snapshot) is reported and the storage checkpoint loaded instead.
#pragma once
#include <optional>

#include "checkpoint/checkpoint_file.h"
#include "config/config.h"
#include "parallel/comm.h"

namespace megatrain {

// Collective. The newest complete set at step ≥ `at_least`, written into `t`, with rank 0 logging
// MEMORY_RESTORE (step, snapshots read on the ranks' own hosts and fetched from others, bytes,
// seconds; resharded_from_dp and dp when re-sharded); nullopt when there is none or it failed (the
// caller then loads the storage checkpoint).
std::optional<CheckpointMeta> load_memory_snapshot(const Config& cfg, const CheckpointTensors& t, const Comm& world,
                                                   int64_t at_least);

}  // namespace megatrain
