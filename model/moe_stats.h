// The routing of a stage's MoE blocks over training forwards, for the step log (trainer/metrics.h):
// per block the assignments each expert kept, those dropped, and the sums of the aux and z losses.
// Evaluation forwards are not counted.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/moe.h"
#include "model/params.h"

namespace megatrain {

// The routing of one MoE block, summed over its micro-batches.
struct MoeLayerStats {
  int layer = 0;                     // the block's index in the model
  std::vector<int64_t> tokens;       // per expert: kept assignments
  std::vector<int64_t> step_tokens;  // the same over the running step only (reset_step_tokens)
  int64_t dropped = 0, assignments = 0;
  double aux = 0.0, z = 0.0;  // sums of the micro-batches' losses
  int64_t micro_batches = 0;
};

class MoeStats {
 public:
  // One entry per MoE block of `range` (cfg.moe.is_moe_layer).
  MoeStats(const ModelConfig& cfg, StageRange range);

  // Block l of the stage routed `tokens` tokens of a training forward as `f` says.
  void add(int l, const MoeForwardStats& f, int64_t tokens);
  const std::vector<MoeLayerStats>& layers() const { return layers_; }
  // Milliseconds the MoE blocks spent moving tokens (model/moe.h) since the last reset: the clock
  // MoeRuntime::dispatch_ms adds to.
  double dispatch_ms() const { return dispatch_ms_; }
  double* dispatch_clock() { return &dispatch_ms_; }
  void reset();
  void reset_step_tokens();

 private:
  int top_k_;
  std::vector<int> entry_;  // per block of the stage: its index in layers_, −1 for a dense block
  std::vector<MoeLayerStats> layers_;
  double dispatch_ms_ = 0.0;
};

}  // namespace megatrain
