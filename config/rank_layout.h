// What one rank of a layout holds, computed in one place from the config and the rank's tensor-,
// pipeline- and expert-parallel coordinates: its model chunks (virtual stage c·pp + pp rank of
// pp · virtual_stages), the pipeline schedule of a training step (per micro-batch count), the parameter layout, the
// optimizer groups (config/optim_groups.h), the micro-batches each chunk holds at once and whether
// backwards are split (zero-bubble weight steps). The run (trainer/rank_run.h) is built from it and
// the planner (planner/plan_memory.h) plans it, so the two are one.
#pragma once
#include <map>
#include <vector>

#include "config/config.h"
#include "config/optim_groups.h"
#include "model/params.h"
#include "parallel/pipeline_schedule.h"

namespace megatrain {

struct RankLayout {
  std::vector<StageRange> ranges;  // per model chunk, in model order
  // This rank's schedule of one training step, by the step's micro-batch count: one entry, or one
  // per size of a batch ramp (config/train_batches.h).
  std::map<int, std::vector<PipeStep>> schedules;
  ParamLayout layout;              // the tensors this rank holds (its tp, pp and ep coordinates)
  std::vector<OptimGroupSpec> groups;
  std::vector<int> slots;  // per chunk: micro-batches whose activations it holds at once (any schedule)
  bool split_backward = false;
};

// Of a resolved config (resolve_config).
RankLayout rank_layout(const Config& c, int tp_rank, int pp_rank, int ep_rank);

}  // namespace megatrain
