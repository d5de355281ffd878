#include "config/optim_groups.h"

#include <algorithm>

namespace megatrain {
namespace {

// Where each chunk's units start in a group's unit list, then the total.
template <class Units>
std::vector<int> unit_bounds(const std::vector<StageRange>& ranges, Units&& units_of) {
  std::vector<int> out{0};
  for (const StageRange& r : ranges) out.push_back(out.back() + static_cast<int>(units_of(r).size()));
  return out;
}

// The first units of chunks after the first that start a new group of buckets (inside the list).
std::vector<int> bucket_breaks(const std::vector<int>& bounds) {
  std::vector<int> out;
  for (size_t k = 1; k + 1 < bounds.size(); ++k)
    if (bounds[k] > 0 && bounds[k] < bounds.back() && (out.empty() || out.back() != bounds[k]))
      out.push_back(bounds[k]);
  return out;
}

std::vector<FlatRange> rebased(std::vector<FlatRange> units, int64_t by) {
  for (FlatRange& u : units) u = u.shifted(-by);
  return units;
}

int unit_holding(const std::vector<FlatRange>& units, int64_t at) {
  for (size_t u = 0; u < units.size(); ++u)
    if (units[u].begin <= at && at < units[u].end) return static_cast<int>(u);
  return -1;
}

OptimGroupSpec group(const Config& c, std::vector<FlatRange> units, std::vector<int> bounds, int64_t begin) {
  OptimGroupSpec g;
  g.begin = begin;
  g.units = rebased(std::move(units), begin);
  g.breaks = bucket_breaks(bounds);
  g.chunk_units = std::move(bounds);
  g.zero = zero_options(c);
  g.order.micro_batches = c.train.global_batch_size / (c.train.micro_batch_size * c.parallel.dp);
  return g;
}

}  // namespace

StageRange virtual_stage_range(const Config& c, int vs) {
  const std::vector<int>& given = c.parallel.pipeline_layers;
  const int stages = c.parallel.pp * c.parallel.virtual_stages;
  const auto layers = [&](int k) { return given.empty() ? c.model.n_layers / stages : given[static_cast<size_t>(k)]; };
  int first = 0;
  for (int k = 0; k < vs; ++k) first += layers(k);
  return {first, layers(vs), vs == 0, vs + 1 == stages};
}

ZeroOptions zero_options(const Config& c) {
  const ParallelConfig& p = c.parallel;
  const auto floats = static_cast<int64_t>(p.bucket_size_mb * 1024.0 * 1024.0 / sizeof(float));
  ZeroOptions z{p.zero_stage, std::max<int64_t>(1, floats), p.overlap_grad_reduce, c.train.precision,
                p.grad_reduce_dtype};
  z.compression = p.grad_compression;
  z.powersgd_rank = p.powersgd_rank;
  z.seed = c.train.seed;
  z.max_staleness = p.max_staleness;
  z.deferred_weight_grads = p.pipeline_schedule == "zero_bubble";
  z.quantized_weights = p.zero_quantized_weights;
  z.quantized_gradients = p.zero_quantized_gradients;
  z.hpz_partition_size = p.zero_hpz_partition_size;
  z.quant_block = p.zero_quant_block;
  z.stream = Stream{c.train.device, nullptr, c.train.precision};
  return z;
}

AdamWOptions adamw_options(const Config& c) {
  const auto& o = c.optimizer;
  return {o.beta1,      o.beta2, o.eps, o.weight_decay, o.grad_clip, o.decay_embeddings, o.decay_norms_and_biases,
          o.state_dtype};
}

std::vector<OptimGroupSpec> optim_group_specs(const Config& c, const ParamLayout& layout,
                                              const std::vector<StageRange>& ranges) {
  std::vector<OptimGroupSpec> out;
  const auto dense_units = [&](const StageRange& r) { return gpt_param_units(layout, r); };
  OptimGroupSpec& dense =
      out.emplace_back(group(c, gpt_param_units(layout, ranges), unit_bounds(ranges, dense_units), 0));
  dense.dp = c.parallel.dp * c.parallel.cp;  // cp ranks hold the same dense parameters (groups.h dp_cp)
  if (dense.zero.compression != GradCompression::none)  // the layout's 2-D tensors
    for (size_t i = 0; i < layout.size(); ++i)
      if (layout.local_shape(i).ndim == 2)
        dense.zero.matrices.push_back({layout.offset(i), layout.local_shape(i)[0], layout.local_shape(i)[1]});
  const bool embedding = ranges.front().embedding, head = ranges.back().head;
  for (size_t k = 0; k + 1 < dense.chunk_units.size(); ++k) {
    const StageRange& r = ranges[k];
    dense.order.chunks.push_back({dense.chunk_units[k], dense.chunk_units[k + 1] - 1, r.embedding, r.head,
                                  c.model.tie_embeddings && r.embedding && r.head});
  }
  dense.order.extra_gather_slots = c.model.tie_embeddings && embedding && head ? 1 : 0;
  if (c.model.tie_embeddings && c.parallel.pp > 1 && (embedding || head)) {
    const size_t i = layout.index_of("embed.wte");
    dense.held = FlatRange{layout.offset(i), layout.offset(i) + layout.local_shape(i).numel()};
    dense.order.held_unit = unit_holding(dense.units, dense.held->begin);
  }

  std::vector<FlatRange> expert_units = moe_expert_units(layout, ranges);
  if (expert_units.empty()) return out;
  const auto experts_of = [&](const StageRange& r) { return moe_expert_units(layout, {r}); };
  OptimGroupSpec& experts =
      out.emplace_back(group(c, std::move(expert_units), unit_bounds(ranges, experts_of), dense_end(layout)));
  experts.experts = true;
  experts.dp = c.parallel.dp / c.parallel.ep * c.parallel.cp;
  const ZeroOptions all = experts.zero;  // the exact path: compression, staleness and ZeRO++ act on the dense ones
  experts.zero = ZeroOptions{all.stage, all.bucket_floats, all.overlap, all.params, all.grad_reduce};
  experts.zero.stream = all.stream;
  for (size_t k = 0; k + 1 < experts.chunk_units.size(); ++k)
    if (experts.chunk_units[k + 1] > experts.chunk_units[k])
      experts.order.chunks.push_back({experts.chunk_units[k], experts.chunk_units[k + 1] - 1});
  return out;
}

}  // namespace megatrain
