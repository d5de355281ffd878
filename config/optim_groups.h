// The rank's parameter groups as a config lays them out: the dense parameters, over the
// data-parallel group, and an MoE model's expert tensors ([Note: expert tensors] in
// model/params.h), over the expert-data-parallel group — each with its units, ZeRO options and the
// backward's order of its units (optim/optim_group.h OptimGroupSpec). RankRun builds its
// optimizer groups from these and the planner plans them (planner/plan_memory.cpp), so the two are
// one.
#pragma once
#include <vector>

#include "config/config.h"
#include "model/params.h"
#include "optim/adamw.h"
#include "optim/optim_group.h"

namespace megatrain {

// The blocks of virtual stage `vs` of pp · virtual_stages: parallel.pipeline_layers, or an even
// split (both checked by the config); the embedding on the first, the head on the last.
StageRange virtual_stage_range(const Config& c, int vs);

// The dense parameters' ZeRO options (without the layout's matrices, which compression adds).
ZeroOptions zero_options(const Config& c);
AdamWOptions adamw_options(const Config& c);
// `layout` and `ranges`: this rank's (its tensor-, pipeline- and expert-parallel coordinates).
std::vector<OptimGroupSpec> optim_group_specs(const Config& c, const ParamLayout& layout,
                                              const std::vector<StageRange>& ranges);

}  // namespace megatrain
