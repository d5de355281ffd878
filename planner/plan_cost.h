// The planner's step time (`megatrain plan`): a cost model of one training step of a layout on a
// device profile (planner/plan_profile.h).
//   compute   model FLOPs per rank (forward + backward, plus the forward recompute repeats) over
//             peak × efficiency;
//   pipeline  the schedule's own lists (parallel/pipeline_schedule.h) played by simulate() with
//             each step's compute, tensor/expert-parallel and point-to-point time as its cost, so
//             the bubble is the schedule's, not a formula's;
//   tp        per block and micro-batch two all-reduces forward and two backward of the (rows, C)
//             activations (sequence parallel: all-gathers and reduce-scatters of the same volume);
//             the backward ones overlap the weight GEMMs when overlap_tp_comm;
//   ep        per MoE block and micro-batch four all-to-alls of the routed rows (dispatch, combine,
//             and their backward);
//   cp        per block and micro-batch the context-parallel attention's messages (ring: 3·(cp − 1)
//             key/value blocks between neighbours, hidden behind the attention as far as the device overlaps;
//             all_to_all: the heads' exchanges); compute counts a rank's 1/cp of the rows;
//   dp        the gradient all-reduce (ZeRO 0) or reduce-scatter (1–3; 2–3 every micro-batch), the
//             parameter all-gather after the update (1–2) or before each use (3), overlapping
//             backward where the trainer overlaps it;
//   optimizer AdamW over the rank's shard, bound by memory bandwidth;
//   cores     CPU ranks only ([Note: CPU ranks share cores], planner/plan_profile.h): the profile's
//             speed is a rank's while it holds its `threads` cores; a node's R ranks need R·threads
//             cores to all work at once, so with share = R·threads / cores > 1 the pipeline part of
//             the step takes at least share × a rank's busy time (its compute and the tp/ep/pp
//             traffic its cores copy: the node's work over its cores), and at least the schedule's
//             makespan (no rank runs faster than its cores). Ranks idle in the bubble leave their
//             cores to the others: the step is the larger of the two, not their product.
// A collective of b bytes over g ranks takes 2(g−1)·latency + (its ring volume)/bandwidth, on the
// intra-node link when the group's ranks (order tp → cp → ep → dp → pp, parallel/groups.h) lie in
// one node, else the inter-node one.
#pragma once
#include "config/config.h"
#include "planner/plan_profile.h"

namespace megatrain {

// Seconds of one step, by where they go (exposed time: what the step waits for).
struct StepCost {
  double compute = 0;    // busy compute of the rank (forward, backward, recompute)
  double bubble = 0;     // pipeline idle time (the schedule's) in the step
  double tp = 0, ep = 0, cp = 0, pp = 0;  // exposed communication inside the pipeline steps
  double dp = 0;         // exposed data-parallel communication
  double optimizer = 0;
  double cores = 0;      // CPU: the node's ranks waiting for its cores, beyond the schedule's makespan
  double step = 0;       // the whole step
  double tokens_per_s = 0;
  double mfu = 0;        // model FLOPs / (step · devices · peak)
};

// A resolved config (resolve_config) on `device`.
StepCost predict_step(const Config& c, const DeviceProfile& device);

}  // namespace megatrain
