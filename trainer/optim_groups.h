// The rank's parameter groups as a config lays them out: the dense parameters, over the
// data-parallel group, and an MoE model's expert tensors ([Note: expert tensors] in
// model/params.h), over the expert-data-parallel group — each with its units, ZeRO options and the
// backward's order of its units. RankRun builds its optimizer groups from these (optim/
// optim_group.h) and the planner plans them (trainer/plan_memory.cpp), so the two are one.
#pragma once
#include <optional>
#include <vector>

#include "model/optimizer.h"
#include "model/params.h"
#include "optim/zero_plan.h"
#include "trainer/config.h"

namespace megatrain {

struct OptimGroupSpec {
  bool experts = false;
  int64_t begin = 0;             // the layout's flat element of the group's element 0
  int dp = 1;                    // the ranks its state is sharded over: dp, or dp / ep for experts
  std::vector<FlatRange> units;  // the group's own flat numbering (rebased by `begin`)
  std::vector<int> chunk_units;  // model chunk k's units: [chunk_units[k], chunk_units[k + 1])
  std::vector<int> breaks;       // where gradient buckets break: the chunks' first units inside
  ZeroOptions zero;
  UnitOrder order;
  std::optional<FlatRange> held;  // a tied embedding's range, summed over its stages ([Note: held bucket])
};

// The dense parameters' ZeRO options (without the layout's matrices, which compression adds).
ZeroOptions zero_options(const Config& c);
AdamWOptions adamw_options(const Config& c);
// `layout` and `ranges`: this rank's (its tensor-, pipeline- and expert-parallel coordinates).
std::vector<OptimGroupSpec> optim_group_specs(const Config& c, const ParamLayout& layout,
                                              const std::vector<StageRange>& ranges);

}  // namespace megatrain
