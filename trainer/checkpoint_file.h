// One checkpoint file in HDF5 (format in docs/checkpoint-format.md): every parameter and its
// Adam state as a dataset with its *global* shape, written through MPI-IO where each rank writes
// only its slice (today, with replicated state, data-parallel rank 0 writes whole tensors and the
// others select nothing). Root attributes carry the training state, the resolved config and the
// layout; each dataset carries a CRC-32 of its bytes, verified on read. Invariant: a read either
// fills every tensor or throws InputError naming the file, the tensor and the reason.
#pragma once
#include <cstdint>
#include <string>

#include "model/params.h"
#include "parallel/comm.h"

namespace megatrain {

inline constexpr const char* kCheckpointFormat = "megatrain-checkpoint";
inline constexpr int64_t kCheckpointVersion = 1;

struct TrainState {
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // global samples consumed (the data loader's position)
  uint64_t seed = 0;             // keys every counter-based random stream (init, dropout, data order)
};

// Views of the state a checkpoint holds; all three buffers follow `layout`.
struct CheckpointTensors {
  const ParamLayout* layout = nullptr;
  float* params = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

struct CheckpointMeta {
  TrainState state;
  std::string config_toml;  // the resolved config it was written with
  std::string layout_json;  // {"tp":…, "pp":…, "dp":…, "cp":…, "ep":…, "world":…}
};

// Collective over `comm`: every rank calls it; rank `writer` provides the data.
void checkpoint_file_write(const std::string& path, const CheckpointTensors& t, const CheckpointMeta& meta,
                           const Comm& comm, int writer);
// Reads on every rank (independent I/O). Verifies format, version, shapes and checksums.
CheckpointMeta checkpoint_file_read(const std::string& path, const CheckpointTensors& t);
// Only the metadata (cheap): for choosing and reporting.
CheckpointMeta checkpoint_file_read_meta(const std::string& path);

}  // namespace megatrain
