// The training run: builds the process groups, ZeRO state, model, optimizer and data loaders from
// a resolved Config and runs the step loop (gradient accumulation over micro-batches, bucketed
// data-parallel reduction overlapping backward, clipping, AdamW over this rank's shard, LR
// schedule, metrics with communication timers and memory per rank, periodic validation).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "parallel/comm.h"
#include "config/config.h"
#include "health/exit_codes.h"

namespace megatrain {

struct TrainResult {
  std::vector<double> losses;      // per step, mean over the global batch
  std::vector<double> grad_norms;  // per step, before clipping
  std::vector<double> val_losses;  // one per evaluation
  int64_t stopped_at = 0;          // the step after which a stop request ended the run; 0 = ran to the end
};

// train.max_consecutive_skips steps in a row had Inf/NaN gradients (fp32, bf16): main exits with
// kExitNonFinite.
class NonFiniteSteps : public Error {
 public:
  using Error::Error;
};

struct TrainOptions {
  bool allow_fresh_start = false;  // checkpoint.load finds nothing valid: start fresh instead of failing
};

TrainResult run_training(const Config& cfg, const Comm& world, const TrainOptions& options);

}  // namespace megatrain
