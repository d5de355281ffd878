// The training run: builds the model, optimizer and data loaders from a resolved Config and
// runs the step loop (gradient accumulation over micro-batches, data-parallel gradient sum,
// clipping, AdamW, LR schedule, metrics, periodic validation).
#pragma once
#include <vector>

#include "parallel/comm.h"
#include "trainer/config.h"

namespace megatrain {

struct TrainResult {
  std::vector<double> losses;      // per step, mean over the global batch
  std::vector<double> grad_norms;  // per step, before clipping
  std::vector<double> val_losses;  // one per evaluation
};

struct TrainOptions {
  bool allow_fresh_start = false;  // checkpoint.load finds nothing valid: start fresh instead of failing
};

TrainResult run_training(const Config& cfg, const Comm& world, const TrainOptions& options);

}  // namespace megatrain
