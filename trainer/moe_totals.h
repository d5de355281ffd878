// The MoE routing of a training interval over the whole job, for the step log (trainer/metrics.h):
// every stage's per-block statistics (model/moe_stats.h) summed over every replica's micro-batches
// in one all-reduce, the same on every rank.
#pragma once
#include <vector>

#include "model/moe_stats.h"
#include "parallel/comm.h"

namespace megatrain {

// Collective over `world`. Per MoE block of the model (model order): its routing since the stages'
// last reset, which this resets. `own`: whether this rank adds its stages' (tensor-parallel ranks
// route the same rows, so only tp rank 0 of each stage does). Empty for a dense model.
std::vector<MoeLayerStats> moe_totals(const ModelConfig& cfg, const std::vector<MoeStats*>& stages, bool own,
                                      const Comm& world);

}  // namespace megatrain
