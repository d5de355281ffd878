// One rank's whole training state as bytes, for the in-memory snapshots that recovery reads instead
// of a storage checkpoint (checkpoint/memory_store.h; docs/robustness.md R26): the rank's parameter
// and optimizer pieces as CheckpointTensors holds them (masters, moments), the TrainState (step,
// data position, seed of the counter-based random streams, skipped steps, loss scaler) and the
// layout it was taken at. Format, little-endian:
//   "MTSNAP01", int32 rank, int32 world, int64 n + n bytes of layout JSON,
//   TrainState (int64 step, consumed_samples; uint64 seed; int64 skipped_steps; float64 loss_scale;
//   int64 growth, hysteresis trackers), int64 pieces, per piece int64 begin, part_begin, part_end
//   and for params, exp_avg, exp_avg_sq int64 begin, end and end − begin float32 values,
//   then the zlib CRC-32 of every byte before it (uint32).
// A snapshot restores into the same rank of the same layout, piece by piece: the bytes are the rank's
// own state, so the run continues bit for bit; or, with the snapshots of its dp peers, re-sharded
// into a layout of another dp (reshard_snapshots).
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
// The same in two parts: everything but the CRC-32 into `out`, whose capacity is reused (a snapshot is
// a copy of the rank's whole state: the step's stall), then seal_snapshot appends the CRC (off the
// step, on the thread that stores it).
void encode_snapshot_body(const CheckpointTensors& t, const SnapshotHeader& h, std::string& out);
void seal_snapshot(std::string& body);

// The header of `bytes`, checked whole (magic, length, CRC-32); a damaged snapshot is a
// CheckpointError naming `source`.
SnapshotHeader snapshot_header(std::string_view bytes, const std::string& source);

// Writes the snapshot's pieces into `t`, which must have the same pieces and slices (the same rank of
// the same layout; otherwise a CheckpointError naming `source` and what differs). Returns the header.
SnapshotHeader restore_snapshot(std::string_view bytes, const CheckpointTensors& t, const std::string& source);

// Re-sharding (a job continuing at a smaller dp after a host was lost): fills `t` from the snapshots
// of the ranks of another layout that held the same tensor-parallel view of the model — the same tp,
// cp and ep coordinates and pipeline stage; only dp, and with it the ZeRO partitions, differed —
// every slice of `t` from the slices of the snapshots that overlap it (an element several hold,
// such as ZeRO 1's replicated parameters, is copied once). A snapshot that is damaged, of another
// step, or a set that leaves an element of `t` unfilled is a CheckpointError naming `source`.
// Returns the first snapshot's header.
SnapshotHeader reshard_snapshots(const std::vector<std::string>& snapshots, const CheckpointTensors& t,
                                 const std::string& source);

}  // namespace megatrain
