// Where memory snapshots live (docs/robustness.md R26): the store of a rank's host, and the pairing
// of hosts by which each rank's snapshot is also on the next host (its buddy's). Read by the
// snapshots (trainer/memory_snapshots.h) and the restore (trainer/memory_recovery.h).
#pragma once
#include "checkpoint/memory_store.h"
#include "config/config.h"
#include "parallel/comm.h"

namespace megatrain {

// The memory store of this rank's host for `cfg`'s run at the layout of `world`: checkpoint.memory_dir,
// or /dev/shm/megatrain/<checkpoint.dir as one name>; the host is host_name(), or vnodeN with
// MEGATRAIN_RANKS_PER_NODE (virtual hosts on one machine).
MemoryStore memory_store_for(const Config& cfg, const Comm& world);
// The rank holding `rank`'s copy: rank + ranks per host, modulo the world; -1 on one host.
int memory_buddy(int rank, int world);
// The rank whose copy `rank` holds (memory_buddy's inverse); -1 on one host.
int memory_ward(int rank, int world);

}  // namespace megatrain
