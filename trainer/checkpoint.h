// Checkpoints as a run uses them (format and folder protocol: docs/checkpoint-format.md,
// checkpoint/). Saving writes DIR/step_NNNNNNN.tmp/model.h5, then rank 0 commits: model.h5 fsync,
// manifest.json written and fsynced, folder fsync, rename to DIR/step_NNNNNNN, DIR fsync, and
// DIR/latest replaced atomically; only then are checkpoints beyond checkpoint.keep_last removed — so
// at every instant the newest committed checkpoint is intact and findable. Each rank saves and
// loads only what it holds (CheckpointTensors). With checkpoint.async the step copies its partition
// into host memory (stage 1, the only stall) and a background thread writes and commits it (stage
// 2, on a communicator of its own); a periodic save that finds the previous one still being
// written skips (saves never overlap), the save that ends a run waits for it. A failed save is
// reported by every rank as CKPT_SAVE_FAILED at the same step boundary and leaves the committed
// checkpoints and `latest` as they were; checkpoint.on_save_fail decides whether training goes on.
#pragma once
#include <array>
#include <atomic>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "config/config.h"
#include "model/params.h"
#include "parallel/comm.h"

namespace megatrain {

// checkpoint.load asked for a checkpoint and none is valid (unless --allow-fresh-start).
class NoValidCheckpoint : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// A save failed under checkpoint.on_save_fail = "exit": main exits with kExitHang (75), and the
// resilient driver restarts from the newest committed checkpoint.
class CheckpointSaveFailed : public Error {
 public:
  using Error::Error;
};

// The model.h5 of a --checkpoint argument: a checkpoint folder (DIR/step_N), or a checkpoint dir
// whose `latest` names one. Throws CheckpointError when it is neither.
std::string checkpoint_model_file(const std::string& arg);

// {"tp":…, "pp":…, "cp":…, "ep":…, "dp":…, "world":…}: the layout a checkpoint or snapshot was taken at.
std::string layout_json(const Config& cfg, int world);

class Checkpointer {
 public:
  Checkpointer(const Config& cfg, const Comm& world);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // What a save does when the previous asynchronous save is still being written (on any rank).
  enum class IfBusy { skip, wait };

  // Collective over `world` (whose ranks partition the state, see CheckpointTensors). First
  // reports the previous save's failure, if it failed (throws CheckpointSaveFailed under
  // on_save_fail = "exit"). Rank 0 logs the save's stall and stage 2 when it is committed. Returns
  // false when it skipped (IfBusy::skip, the previous save still being written). `take` gives the
  // state to save; it is called only when the save goes ahead (on a device it copies the state
  // to the host, trainer/rank_run.h).
  bool save(const std::function<CheckpointTensors()>& take, const TrainState& state, IfBusy if_busy);
  // Collective: waits for the save in flight and reports its failure as save() does.
  void wait();

 private:
  // The seconds a save blocked training: waiting for the previous save, then copying the state
  // (asynchronous saves: stage 1).
  struct Stall {
    double waiting_s = 0.0, copy_s = 0.0;
  };
  struct Failure {
    int64_t step = 0;
    int err = 0;
    std::string what;
  };
  // Stage 2, collective over io_: writes, commits, logs (with the save's stall). Throws the same
  // CheckpointIoError on every rank when it fails; the .tmp folder is then removed.
  void write(const CheckpointTensors& t, const CheckpointMeta& meta, Stall stall);
  // Rank 0: the commit of a written step_N.tmp (see the top of this file).
  void commit(const CheckpointMeta& meta, const std::vector<TensorCrc>& tensors, int64_t bytes, uint32_t crc);
  // write() on the calling thread, a failure kept in failure_ for report().
  void write_keeping_failure(const CheckpointTensors& t, const CheckpointMeta& meta, Stall stall);
  void join();
  void report();  // collective

  const Config& cfg_;
  const Comm& world_;
  Comm io_;  // a communicator of its own, so the writer thread never interleaves with training's
  std::string config_toml_, layout_json_;
  // Each piece's partitions (params, exp_avg, exp_avg_sq), for async saves ([Note: checkpoint pieces]).
  std::vector<std::array<std::vector<float>, 3>> host_;
  std::thread worker_;
  std::atomic<bool> writing_{false};
  std::exception_ptr worker_error_;  // anything but an I/O failure: rethrown by join()
  std::optional<Failure> failure_;
};

// Collective over `comm` (whose ranks partition the state, see CheckpointTensors). Resolves
// checkpoint.load ("" = fresh start, "latest" = newest valid under checkpoint.dir with fallback to
// older ones, else a checkpoint folder) and fills `t`'s slices on every rank. Returns the loaded
// metadata, or nullopt for a fresh start. Throws NoValidCheckpoint when a load was asked for and
// nothing valid exists, unless allow_fresh_start. Every rank reaches the same outcome.
std::optional<CheckpointMeta> checkpoint_load(const Config& cfg, const CheckpointTensors& t, const Comm& comm,
                                              bool allow_fresh_start, bool verbose);

}  // namespace megatrain
