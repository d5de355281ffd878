// One rank's share of the training state as bytes, for the in-memory snapshots that recovery reads
// instead of a storage checkpoint (checkpoint/memory_store.h; docs/robustness.md R26): the rank's
// ZeRO partition of its parameter and optimizer pieces (masters, moments) — what else it holds, its
// data-parallel peers hold in theirs, so a snapshot is 1/dp of the rank's view whatever the ZeRO
// stage — the TrainState (step, data position, seed of the counter-based random streams, skipped
// steps, loss scaler) and the layout it was taken at. Format, little-endian:
//   "MTSNAP01", int32 rank, int32 world, int64 n + n bytes of layout JSON,
//   TrainState (int64 step, consumed_samples; uint64 seed; int64 skipped_steps; float64 loss_scale;
//   int64 growth, hysteresis trackers), int64 pieces, per piece int64 begin, part_begin, part_end
//   and for params, exp_avg, exp_avg_sq int64 begin, end and end − begin float32 values (the
//   partition, [part_begin, part_end)), then the zlib CRC-32 of every byte before it (uint32).
// A rank restores from the snapshots of the ranks that held its view of the model (its dp group's
// at the same layout; at another dp the old ranks with the same tp, ep coordinates and stage; an
// MoE model's dense piece also from the other ep coordinates: [Note: dense pieces across ep]),
// every element from the one that held it, so the run continues bit for bit.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_file.h"

namespace megatrain {

struct SnapshotHeader {
  int rank = 0, world = 0;
  std::string layout_json;
  TrainState state;
};

std::string encode_snapshot(const CheckpointTensors& t, const SnapshotHeader& h);
// The same in place, into snapshot_size bytes at `out` (a file of the memory store mapped for
// writing, checkpoint/memory_store.h): a copy of the rank's whole state, its CRC-32 taken as it goes.
size_t snapshot_size(const CheckpointTensors& t, const SnapshotHeader& h);
void encode_snapshot_into(const CheckpointTensors& t, const SnapshotHeader& h, char* out);

// The header of `bytes`, checked whole (magic, length, CRC-32); a damaged snapshot is a
// CheckpointError naming `source`.
SnapshotHeader snapshot_header(std::string_view bytes, const std::string& source);

// Fills `t` from the snapshots of the ranks that held the same view of the model — the same tp, cp
// and ep coordinates and pipeline stage; only the dp coordinate, and at another layout dp itself and
// with it the ZeRO partitions, differ — every slice of `t` from the slices of the snapshots' pieces
// of the same group (the same `begin`) that overlap it. [Note: dense pieces across ep] An MoE
// model's dense parameters are sharded over every data-parallel rank, the expert-parallel ones
// included, while its experts are sharded over the ranks with the same ep coordinate: a snapshot i
// with experts_too[i] false (of a rank with another ep coordinate) gives only its dense piece, the
// one at begin 0; an empty experts_too means true for every snapshot. A snapshot that is damaged,
// of another step, or a set that leaves an element of `t` unfilled is a CheckpointError naming
// `source`. Returns the first snapshot's header.
SnapshotHeader restore_snapshots(const std::vector<std::string>& snapshots, const CheckpointTensors& t,
                                 const std::string& source, const std::vector<bool>& experts_too = {});

}  // namespace megatrain
