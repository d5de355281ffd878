// The training run: builds the process groups, ZeRO state, model, optimizer and data loaders from
// a resolved Config and runs the step loop (gradient accumulation over micro-batches, bucketed
// data-parallel reduction overlapping backward, clipping, AdamW over this rank's shard, LR
// schedule, metrics with communication timers and memory per rank, periodic validation).
#pragma once
#include "config/config.h"
#include "parallel/comm.h"
#include "trainer/step_types.h"

namespace megatrain {

struct TrainOptions {
  bool allow_fresh_start = false;  // checkpoint.load finds nothing valid: start fresh instead of failing
};

TrainResult run_training(const Config& cfg, const Comm& world, const TrainOptions& options);

}  // namespace megatrain
