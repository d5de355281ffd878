#include "planner/plan_memory.h"

#include <algorithm>
#include <vector>

#include "config/rank_layout.h"
#include "model/stage_plan.h"

namespace megatrain {

PlannedMemory plan_memory(const Config& c, int pp_rank) {
  const ParallelConfig& p = c.parallel;
  const RankLayout r = rank_layout(c, 0, pp_rank, 0);  // every tp and ep rank holds as much

  // Each optimizer group's ZeRO state and AdamW moments, as the run makes them (config/optim_groups.h).
  PlannedMemory out;
  out.pp_rank = pp_rank;
  MemoryMetrics& m = out.bytes;
  for (const OptimGroupSpec& g : r.groups) {
    const ZeroPlan z = plan_zero(g.units, g.dp, 0, g.zero, g.breaks, g.order);
    const ZeroMemory zm = z.memory();
    m.params += zm.params, m.master_params += zm.master_params, m.grads += zm.grads, m.comm_buffers += zm.comm_buffers;
    // AdamW's m and v, in optimizer.state_dtype (optim/adamw.h state_bytes).
    m.optimizer += 2 * z.optimizer_padded * static_cast<int64_t>(dtype_size(dtype_of(c.optimizer.state_dtype)));
  }

  // Activations: each chunk's stage plan (model/stage_plan.h), with the slots the schedule holds.
  const TpShape tp(0, p.tp, TpOptions{p.sequence_parallel, p.overlap_tp_comm},
                   int64_t{c.train.micro_batch_size} * (c.train.seq_len / p.cp), c.model.d_model);
  const CpSplit split{p.cp, 0, c.train.seq_len};  // every cp rank holds as many rows
  for (size_t k = 0; k < r.ranges.size(); ++k) {
    const StageOptions options{r.slots[k], r.split_backward, c.train.recompute, c.train.recompute_layers,
                               c.train.precision, c.train.device, c.train.bf16_activations};
    const StageSpec spec = stage_spec(c.model, c.train.micro_batch_size, c.train.seq_len / p.cp, r.ranges[k], options,
                                      tp, p.ep, split, p.cp_comm);
    m.activations += static_cast<int64_t>(plan_stage(spec).bytes);
  }
  return out;
}

std::vector<int> heaviest_pp_candidates(const Config& c) {
  const int pp = c.parallel.pp;
  if (!c.parallel.pipeline_layers.empty() || pp <= 2) {
    std::vector<int> all;
    for (int s = 0; s < pp; ++s) all.push_back(s);
    return all;
  }
  return {0, pp - 1};
}

PlannedMemory plan_memory(const Config& c) {
  PlannedMemory best = plan_memory(c, 0);
  for (int s : heaviest_pp_candidates(c)) {
    PlannedMemory m = plan_memory(c, s);
    if (m.total() > best.total()) best = m;
  }
  return best;
}

}  // namespace megatrain
