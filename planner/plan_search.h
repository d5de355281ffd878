// The planner's search (`megatrain plan`): every (tp, pp, cp, dp, ep, ZeRO stage, recompute,
// micro-batch) layout of a model on N devices, each checked by the trainer's own config rules
// (resolve_config), its memory per rank predicted (planner/plan_memory.h) and dropped when over the
// device's, its step time predicted (planner/plan_cost.h), ranked by tokens per second.
// tp runs inside a node (powers of two up to devices_per_node) with sequence parallelism; cp (powers
// of two, ring and all_to_all) on CPU profiles, where the trainer builds it; the
// config's global batch, pipeline schedule and everything else stay as given.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "planner/plan_cost.h"
#include "planner/plan_memory.h"
#include "planner/plan_profile.h"

namespace megatrain {

struct Plan {
  Config config;  // resolved
  PlannedMemory memory;
  StepCost cost;
};

struct PlanSearch {
  std::vector<Plan> ranked;   // fitting layouts, fastest first
  int considered = 0;         // layouts enumerated
  int invalid = 0;            // refused by the config rules
  int over_memory = 0;        // valid, but over the device's memory
};

// `base`: a loaded config (load_config) whose train.global_batch_size is set.
PlanSearch search_layouts(const Config& base, int devices, const DeviceProfile& device);

// One line per layout: "tp 2 pp 1 dp 2 ep 1 zero 1 rc none mb 4".
std::string layout_name(const Config& c);
// A few lines on the best plan: where its step time and memory go, and why not the runner-up.
std::string explain(const PlanSearch& s, const DeviceProfile& device);

}  // namespace megatrain
