// One checkpoint file in HDF5 (format in docs/checkpoint-format.md): every parameter and its
// Adam state as a dataset with its *global* shape, the same whatever the parallel layout that wrote
// it. Sharded I/O: each rank holds its tensor-parallel view of the tensors (model/params.h) and a
// partition of that view's flat layout (ZeRO over dp); a write stores every global element once —
// from the partition that holds it, and of values several tp ranks share, from the lowest of them —
// through independent MPI-IO (datasets created collectively; no two-phase buffering, which costs
// many small exchanges), and a read fills on each rank exactly the slices it holds, from the
// global positions of its elements. Root attributes carry the training state, the resolved config
// and the layout; each dataset carries a CRC-32 of all its bytes in global order, combined from the
// writers' pieces and verified, piece by writer, on read. Invariant: a read either fills every
// slice on every rank or throws the same InputError, naming the file, the tensor and the reason, on
// every rank.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "model/params.h"
#include "parallel/comm.h"
#include "parallel/flat_range.h"

namespace megatrain {

inline constexpr const char* kCheckpointFormat = "megatrain-checkpoint";
// 2 adds meta_crc32; 3 adds the loss scaler's state and skipped steps. Versions 1 and 2 still load.
inline constexpr int64_t kCheckpointVersion = 3;

struct TrainState {
  int64_t step = 0;              // training steps completed (each consumed one global batch)
  int64_t consumed_samples = 0;  // global samples consumed (the data loader's position)
  uint64_t seed = 0;             // keys every counter-based random stream (init, dropout, data order)
  // fp16 (trainer/loss_scaler.h): steps among `step` whose update was skipped for overflowing
  // gradients (optimizer updates = step − skipped_steps), and the dynamic loss scaler's state
  // (loss_scale 0 = no loss scaling). Zero in files before version 3.
  int64_t skipped_steps = 0;
  double loss_scale = 0.0;
  int64_t loss_scale_growth_tracker = 0, loss_scale_hysteresis_tracker = 0;
};

// A rank's piece of one flat buffer: data[j] is flat element begin + j, for j in [0, end − begin).
struct FlatSlice {
  float* data = nullptr;
  int64_t begin = 0, end = 0;
};

// What one rank holds of the state a checkpoint stores; the flat index space is `layout`'s (this
// rank's tensor-parallel view), which the pieces cover in order. [Note: checkpoint pieces] A piece
// holds the tensors from its `begin` to the next piece's (the last to layout->total()): its
// parameters and moments, each a slice containing the piece's partition [part_begin, part_end).
// The ranks of one tp rank partition each piece's range. ZeRO 0: three full slices; ZeRO 1/2: full
// params, partition-only moments; ZeRO 3: all three partition-only. An MoE model's expert tensors
// (flat range [dense_end, total()), model/params.h) are partitioned over other ranks (the
// expert-data-parallel group) than the dense ones, so they are a piece of their own.
// `stored` lists the global tensors of the file (names and shapes: the whole model at tp = 1, whose
// vocabulary padding is that of tp = 1); nullptr means `layout` itself.
struct CheckpointPiece {
  FlatSlice params, exp_avg, exp_avg_sq;
  int64_t part_begin = 0, part_end = 0;  // this rank's partition
  int64_t begin = 0;                     // the first flat element of the tensors it holds
};
struct CheckpointTensors {
  CheckpointTensors() = default;
  CheckpointTensors(const ParamLayout* layout, const ParamLayout* stored, std::vector<CheckpointPiece> pieces)
      : layout(layout), stored(stored), pieces(std::move(pieces)) {}
  // One piece holding every tensor.
  CheckpointTensors(const ParamLayout* layout, FlatSlice params, FlatSlice exp_avg, FlatSlice exp_avg_sq,
                    int64_t part_begin, int64_t part_end, const ParamLayout* stored = nullptr)
      : layout(layout), stored(stored), pieces{{params, exp_avg, exp_avg_sq, part_begin, part_end, 0}} {}
  const ParamLayout* layout = nullptr;
  const ParamLayout* stored = nullptr;
  std::vector<CheckpointPiece> pieces;  // by `begin`, the first at 0
  std::vector<std::shared_ptr<void>> keep;  // owns slices made for this view (optim/host_moments.h), if any
};

// Full (replicated) buffers of layout.total() floats each, held by rank `rank` of a communicator of
// `ranks` ranks (its partition: flat_partition, parallel/flat_range.h). Single-process use: rank 0 of 1.
CheckpointTensors checkpoint_tensors_full(const ParamLayout& layout, float* params, float* exp_avg, float* exp_avg_sq,
                                          int rank, int ranks);

struct CheckpointMeta {
  TrainState state;
  std::string config_toml;  // the resolved config it was written with
  std::string layout_json;  // {"tp":…, "pp":…, "dp":…, "cp":…, "ep":…, "world":…}
};

// The root attribute meta_crc32: zlib's CRC-32 of the bytes
// "step=S\nconsumed_samples=C\nseed=D\nconfig=TOML\nparallel_layout=JSON\n" (decimal integers),
// and from version 3 on followed by "skipped_steps=K\nloss_scale=X\nloss_scale_growth_tracker=G\n
// loss_scale_hysteresis_tracker=H\n" (X: the shortest decimal that reads back as the double).
uint32_t checkpoint_meta_crc32(const CheckpointMeta& meta, int64_t version = kCheckpointVersion);

struct CheckpointWritten {
  std::vector<TensorCrc> tensors;  // every dataset's crc32 attribute, in file order (the same on every rank)
  int64_t bytes = 0;               // the tensor bytes this rank wrote
};

// Collective over `comm`: every rank writes its partition of every tensor. An I/O failure on any
// rank (a full disk, a file-size limit, a device error) is the same CheckpointIoError
// (checkpoint/file_io.h) on every rank, carrying the errno the failing call left (0 when MPI-IO
// left none). The ranks agree before each dataset whether all have gone well so far, stop
// together after a failure and still close the file together, so none waits for another.
CheckpointWritten checkpoint_file_write(const std::string& path, const CheckpointTensors& t,
                                        const CheckpointMeta& meta, const Comm& comm);

// Run on the metadata, on every rank, before any tensor is read; throws InputError to refuse the file
// (the read then throws InputError; a damaged file throws CheckpointError).
using CheckpointMetaCheck = std::function<void(const CheckpointMeta&)>;

// Collective over `comm`: every rank reads what its slices hold (independent I/O, never the whole
// file) and verifies format, version, shapes and, for its partition, checksums.
CheckpointMeta checkpoint_file_read(const std::string& path, const CheckpointTensors& t, const Comm& comm,
                                    const CheckpointMetaCheck& check_meta = {});
// The same in this process alone (MPI not needed): `t`'s partition is [0, total).
CheckpointMeta checkpoint_file_read(const std::string& path, const CheckpointTensors& t);
// Only the metadata (cheap): for choosing and reporting.
CheckpointMeta checkpoint_file_read_meta(const std::string& path);

}  // namespace megatrain
