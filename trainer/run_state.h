// Where training stands beyond the tensors: the steps done, the data position, the updates
// skipped, the fp16 loss scale. A start takes it from the checkpoint checkpoint.load names (or
// step 0), a spike rollback from the newest committed one, and every save records it.
#pragma once
#include <cstdint>
#include <optional>

#include "trainer/checkpoint.h"
#include "trainer/loss_scaler.h"
#include "trainer/rank_run.h"

namespace megatrain {

struct RunState {
  int64_t step = 0;       // steps done
  int64_t data_skip = 0;  // global batches skipped by spike rollbacks: the data position is step + data_skip
  int64_t skipped = 0;    // updates skipped (Inf/NaN, spikes); they do not advance the LR schedule
  int rollbacks = 0;
  bool loaded = false;       // from a checkpoint or memory snapshots (else the parameters were drawn)
  bool from_latest = false;  // loaded with checkpoint.load = "latest": a committed checkpoint to roll back to
  bool from_memory = false;  // loaded from memory snapshots (trainer/memory_recovery.h)
  std::optional<DynamicLossScaler> scaler;  // fp16

  double loss_scale() const { return scaler ? scaler->scale() : 1.0; }
  // What a checkpoint of the state after step `done` records; `sizes`: the training batches'.
  TrainState saved(int64_t done, const Config& cfg, const BatchSizes& sizes) const;
};

// The state to start from: checkpoint.load's checkpoint written into `state` (RankRun's
// checkpoint_tensors()) and taken over by `run`, or a fresh start at step 0 (run.initialise(): `run`
// was built with RankRun::ParamsAt::load, so a resume draws no parameters it overwrites). With memory snapshots
// and checkpoint.load = "latest", the newest complete set of them when it is at least as new as the
// newest storage checkpoint (trainer/memory_recovery.h).
RunState resume(const Config& cfg, const CheckpointTensors& state, RankRun& run, const Comm& world,
                bool allow_fresh_start);

// health.on_spike = "rollback" (docs/robustness.md R17, PaLM's recipe): reloads the newest committed
// checkpoint in this process and moves the data health.spike_skip_batches global batches past its
// position, so the batches that led to the spike are not trained on again.
void roll_back(const Config& cfg, const CheckpointTensors& state, RankRun& run, const Comm& world, RunState& at,
               int64_t spike_step);

}  // namespace megatrain
