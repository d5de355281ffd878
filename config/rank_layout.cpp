#include "config/rank_layout.h"

#include <algorithm>

#include "config/train_batches.h"
#include "kernels/check.h"
#include "parallel/pipeline.h"

namespace megatrain {

RankLayout rank_layout(const Config& c, int tp_rank, int pp_rank, int ep_rank) {
  const ParallelConfig& p = c.parallel;
  MT_CHECK(p.dp > 0 && c.train.global_batch_size > 0, "rank_layout needs a resolved config (resolve_config)");
  RankLayout r;
  for (int k = 0; k < p.virtual_stages; ++k) r.ranges.push_back(virtual_stage_range(c, k * p.pp + pp_rank));
  for (const int64_t size : train_batch_sizes(c).sizes()) {
    const int micro = micro_batches_of(c, size);
    r.schedules[micro] = pipeline_schedule(p.pipeline_schedule, pp_rank, PipeShape{p.pp, micro, p.virtual_stages});
  }
  r.layout = gpt_param_layout(c.model, TpCoord{tp_rank, p.tp}, p.sequence_parallel, r.ranges, EpCoord{ep_rank, p.ep});
  r.groups = optim_group_specs(c, r.layout, r.ranges);
  r.slots.assign(static_cast<size_t>(p.virtual_stages), 0);
  for (const auto& [micro, steps] : r.schedules)
    for (int k = 0; k < p.virtual_stages; ++k)
      r.slots[static_cast<size_t>(k)] = std::max(r.slots[static_cast<size_t>(k)], peak_held(steps, k));
  r.split_backward = splits_backward(r.schedules.begin()->second);
  return r;
}

}  // namespace megatrain
