#include "config/rank_layout.h"

#include "kernels/check.h"
#include "parallel/pipeline.h"

namespace megatrain {

RankLayout rank_layout(const Config& c, int tp_rank, int pp_rank, int ep_rank) {
  const ParallelConfig& p = c.parallel;
  MT_CHECK(p.dp > 0 && c.train.global_batch_size > 0, "rank_layout needs a resolved config (resolve_config)");
  const int micro = c.train.global_batch_size / (c.train.micro_batch_size * p.dp);
  RankLayout r;
  for (int k = 0; k < p.virtual_stages; ++k) r.ranges.push_back(virtual_stage_range(c, k * p.pp + pp_rank));
  r.steps = pipeline_schedule(p.pipeline_schedule, pp_rank, PipeShape{p.pp, micro, p.virtual_stages});
  r.layout = gpt_param_layout(c.model, TpCoord{tp_rank, p.tp}, p.sequence_parallel, r.ranges, EpCoord{ep_rank, p.ep});
  r.groups = optim_group_specs(c, r.layout, r.ranges);
  for (int k = 0; k < p.virtual_stages; ++k) r.slots.push_back(peak_held(r.steps, k));
  r.split_backward = splits_backward(r.steps);
  return r;
}

}  // namespace megatrain
