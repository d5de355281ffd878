#include "optim/zero_parts.h"

namespace megatrain {
namespace {

// Stages 0–2: every rank holds every value compute reads; stage 0 updates them all, 1–2 a partition
// each and gather the others'.
std::unique_ptr<ParamStore> replicated_params(const ZeroPlan& plan, const Comm& dp) {
  const ZeroOptions& o = plan.options;
  std::optional<PartitionGather> gather;
  if (o.stage > 0) gather = PartitionGather{dp, plan.part_counts, plan.partition.begin};
  if (o.quantized_weights) return make_quantized_params(plan, dp);
  if (o.params != Precision::fp32) return make_slot_params(plan, make_half_copy(plan, std::move(gather)), false);
  return make_flat_params(plan, std::move(gather));
}

// Stage 3: each rank holds its shard, and a unit is gathered just before the model reads it.
std::unique_ptr<ParamStore> sharded_params(const ZeroPlan& plan, const Comm& dp) {
  const ZeroOptions& o = plan.options;
  std::unique_ptr<SlotCodec> shard = o.quantized_weights           ? make_quantized_shard(plan, dp)
                                     : o.params != Precision::fp32 ? make_half_shard(plan, dp)
                                                                   : make_float_shard(plan, dp);
  if (o.hpz_partition_size > 1) shard = make_hpz(plan, dp, std::move(shard));
  return make_slot_params(plan, std::move(shard), true);
}

std::unique_ptr<Reducer> wire(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<Collective> c) {
  const ZeroOptions& o = plan.options;
  if (o.compression != GradCompression::none) return make_compressed_wire(plan, dp, std::move(c));
  if (o.quantized_gradients) return make_qgz_wire(plan, dp, std::move(c));
  if (o.grad_reduce == Precision::bf16) return make_bf16_wire(plan, std::move(c));
  return make_float_wire(std::move(c));
}

}  // namespace

ZeroParts make_zero_parts(const ZeroPlan& plan, const Comm& dp, std::function<void(int)> complete) {
  const int stage = plan.options.stage;
  ZeroParts parts{stage == 3 ? sharded_params(plan, dp) : replicated_params(plan, dp), nullptr, nullptr,
                  DeferredReductions(plan)};
  switch (stage) {
    case 0:
      parts.grads = make_full_grads(plan);
      parts.reducer = wire(plan, dp, make_all_reduce(plan, dp));
      break;
    case 1:
      parts.grads = make_scattered_grads(plan);
      parts.reducer = wire(plan, dp, make_reduce_scatter(plan, dp));
      break;
    default:
      parts.grads = make_pooled_grads(plan, std::move(complete));
      parts.reducer = wire(plan, dp, make_reduce_scatter(plan, dp));
      break;
  }
  return parts;
}

}  // namespace megatrain
