#include "optim/zero_plan.h"

#include <algorithm>
#include <numeric>

#include "kernels/check.h"
#include "optim/compress/block_quant.h"
#include "optim/grad_pool.h"

namespace megatrain {
namespace {

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

std::vector<int64_t> packed_each(const std::vector<int64_t>& counts, int64_t block) {
  std::vector<int64_t> out;
  for (const int64_t n : counts) out.push_back(quant_packed_bytes(n, block));
  return out;
}

// |r ∩ partition of each rank|, in rank order.
std::vector<int64_t> counts_of(FlatRange r, int64_t total, int dp) {
  std::vector<int64_t> counts;
  for (int k = 0; k < dp; ++k) counts.push_back(flat_intersect(r, flat_partition(total, k, dp)).size());
  return counts;
}

ZeroDType half_dtype(Precision p) { return p == Precision::bf16 ? ZeroDType::bf16 : ZeroDType::f16; }

// The working copies of bucket b's reduction while it is in flight ([Note: bf16 reduction], qgZ).
int64_t exchange_bytes(const ZeroPlan& z, int b) {
  const ZeroOptions& o = z.options;
  const auto k = static_cast<size_t>(b);
  if (o.quantized_gradients)
    return sum_of(packed_each(z.bucket_counts[k], o.quant_block)) +
           z.dp * quant_packed_bytes(z.bucket_counts[k][static_cast<size_t>(z.rank)], o.quant_block);
  if (o.grad_reduce == Precision::bf16)
    return 2 * (z.buckets[b].range.size() + (z.partitioned ? z.bucket_mine[k].size() : 0));
  return 0;
}

// One replay of a step's backward (UnitOrder) through the rules the runtime follows (ZeroState's
// bucket protocol, [Note: gradient pool]): the pool's buffers and the peak of the reductions'
// working copies. Stages 0–1 reduce each chunk's buckets on the last micro-batch and complete them
// at its end; stages 2–3 on every micro-batch, taking pool buffers as backward writes (three
// micro-batches show the steady state). The held bucket keeps its buffer until it is reduced, alone,
// after the last micro-batch.
ZeroWorking replay(const ZeroPlan& z, const UnitOrder& order) {
  const bool pooled = z.options.stage >= 2;
  const GradBuckets& buckets = z.buckets;
  const int held = order.held_unit >= 0 ? buckets.bucket_of(order.held_unit) : -1;
  GradPool pool(buckets.size());
  std::vector<int> pending(static_cast<size_t>(buckets.size()));
  std::vector<bool> issued(pending.size());
  int64_t exchange = 0;
  ZeroWorking w;
  const auto issue = [&](int b) {
    issued[static_cast<size_t>(b)] = true;
    pool.issued(b);
    exchange += exchange_bytes(z, b);
    w.exchange_bytes = std::max(w.exchange_bytes, exchange);
  };
  const auto complete = [&](int b) {
    exchange -= exchange_bytes(z, b);
    pool.release(b);
  };
  const auto take = [&](int unit) {
    const int b = buckets.bucket_of(unit);
    if (pooled) pool.take(b, buckets[b].range.size(), complete);
  };
  const auto done = [&](int unit) {  // on the micro-batch that reduces
    const int b = buckets.bucket_of(unit);
    if (--pending[static_cast<size_t>(b)] == 0 && z.options.overlap && b != held) issue(b);
  };
  const int micro = pooled ? std::min(order.micro_batches, 3) : 1;
  for (int m = 0; m < micro; ++m)
    for (auto ch = order.chunks.rbegin(); ch != order.chunks.rend(); ++ch) {
      const int first = buckets.bucket_of(ch->last_unit), end = buckets.bucket_of(ch->first_unit) + 1;
      for (int b = first; b < end; ++b)
        pending[static_cast<size_t>(b)] = buckets[b].num_units(), issued[static_cast<size_t>(b)] = false;
      if (ch->head) {
        take(ch->last_unit);
        if (ch->shares_embedding) take(ch->first_unit);
        done(ch->last_unit);
      }
      const int blocks_begin = ch->first_unit + (ch->embedding ? 1 : 0),
                blocks_end = ch->last_unit + 1 - (ch->head ? 1 : 0);
      for (int u = blocks_end - 1; u >= blocks_begin; --u) take(u), done(u);
      if (ch->embedding) {
        if (!ch->shares_embedding) take(ch->first_unit);
        done(ch->first_unit);
      }
      for (int b = first; b < end; ++b)
        if (b != held && !issued[static_cast<size_t>(b)]) issue(b);
      for (int b = first; b < end; ++b)
        if (b != held) complete(b);
    }
  if (held >= 0) {
    take(order.held_unit);
    issue(held);
    complete(held);
  }
  w.grad_pool_floats = pool.floats();
  const bool slots = z.slot.count > 0;
  w.gather_slots = slots ? (z.options.stage == 3 ? 2 : 1) + order.extra_gather_slots : 0;
  return w;
}

}  // namespace

int64_t ZeroBuffer::bytes() const {
  switch (dtype) {
    case ZeroDType::f32: return 4 * count;
    case ZeroDType::bf16:
    case ZeroDType::f16: return 2 * count;
    case ZeroDType::packed: break;
  }
  return count;
}

std::vector<ZeroProblem> zero_options_problems(const ZeroOptions& o, int dp) {
  std::vector<ZeroProblem> out;
  const auto need = [&](bool ok, ZeroSwitch what, std::string message) {
    if (!ok) out.push_back({what, std::move(message)});
  };
  const bool fp32_reduce = o.grad_reduce == Precision::fp32, plain = o.compression == GradCompression::none;
  need(o.stage >= 0 && o.stage <= 3, ZeroSwitch::stage, fmt::format("ZeRO stage {} (0..3)", o.stage));
  need(plain || (o.stage == 0 && fp32_reduce), ZeroSwitch::compression,
       fmt::format("gradient compression needs ZeRO stage 0 and float32 reduction (stage {}, {})", o.stage,
                   precision_name(o.grad_reduce)));
  need(o.max_staleness >= 0 && (o.max_staleness == 0 || (o.stage == 0 && fp32_reduce && plain)), ZeroSwitch::staleness,
       fmt::format("max_staleness {} needs ZeRO stage 0, float32 reduction and no compression", o.max_staleness));
  need(o.stream.device == Device::cpu || (!o.quantized_weights && plain && !o.quantized_gradients &&
                                          o.hpz_partition_size <= 1 && o.max_staleness == 0),
       ZeroSwitch::device,
       "ZeRO on a device reduces gradients exactly, without compression, ZeRO++ or staleness ([Note: ZeRO on a "
       "device])");
  need(!o.quantized_weights || (o.stage >= 1 && o.params == Precision::fp32), ZeroSwitch::qwz,
       fmt::format("ZeRO++ qwZ needs stage 1–3 and float32 parameters (stage {}, {})", o.stage,
                   precision_name(o.params)));
  need(!o.quantized_gradients || (o.stage >= 1 && fp32_reduce && plain), ZeroSwitch::qgz,
       "ZeRO++ qgZ needs stage 1–3, float32 reduction and no gradient compression");
  need(o.hpz_partition_size <= 1 || (o.stage == 3 && dp % o.hpz_partition_size == 0), ZeroSwitch::hpz,
       fmt::format("ZeRO++ hpZ needs stage 3 and a partition size that divides the {} data-parallel ranks (stage {}, "
                   "size {})",
                   dp, o.stage, o.hpz_partition_size));
  need(o.quant_block >= 1, ZeroSwitch::quant_block, fmt::format("ZeRO++ quantization block {} (≥ 1)", o.quant_block));
  need(!o.deferred_weight_grads || o.stage < 2, ZeroSwitch::deferred_grads,
       fmt::format("deferred weight gradients need stage 0 or 1, whose reduction waits for the step's end (stage {}); "
                   "stages 2 and 3 reduce a micro-batch's gradients as its backward ends",
                   o.stage));
  return out;
}

ZeroTraffic zero_traffic(const ZeroOptions& o) {
  return {.sharded_update = o.stage >= 1,
          .grads_reduce_scattered = o.stage >= 1,
          .grads_per_micro_batch = o.stage >= 2,
          .params_gathered_after_update = o.stage == 1 || o.stage == 2,
          .param_gathers_per_micro_batch = o.stage == 3 ? 2 : 0};
}

ZeroPlan plan_zero(std::vector<FlatRange> units, int dp, int rank, const ZeroOptions& o, const std::vector<int>& breaks,
                   const UnitOrder& order) {
  const std::vector<ZeroProblem> problems = zero_options_problems(o, dp);
  MT_CHECK(problems.empty(), "{}", problems.empty() ? "" : problems.front().message);
  const int64_t T = units.empty() ? 0 : units.back().end;
  ZeroPlan z{.options = o,
             .units = units,
             .dp = dp,
             .rank = rank,
             .total = T,
             .shard = flat_shard_size(T, dp),
             .partition = flat_partition(T, rank, dp),
             .buckets = GradBuckets(units, o.bucket_floats, breaks)};
  z.part_counts = counts_of({0, T}, T, dp);
  for (const FlatRange& u : units) {
    z.unit_counts.push_back(counts_of(u, T, dp));
    z.max_unit = std::max(z.max_unit, u.size());
  }
  for (int b = 0; b < z.buckets.size(); ++b) {
    z.bucket_counts.push_back(counts_of(z.buckets[b].range, T, dp));
    z.bucket_mine.push_back(flat_intersect(z.buckets[b].range, z.partition));
  }
  // The sizes of each stage ([Note: 16-bit parameters], [Note: ZeRO++]).
  const bool sixteen = o.params != Precision::fp32, apart = sixteen || o.quantized_weights, sharded = o.stage == 3;
  z.partitioned = o.stage >= 1;
  z.optimizer_range = z.partitioned ? z.partition : FlatRange{0, T};
  z.optimizer_padded = z.partitioned ? z.shard : T;
  z.held_range = apart ? z.optimizer_range : sharded ? z.partition : FlatRange{0, T};
  const int64_t held = sharded ? z.shard : T;
  z.params.count = sixteen || (o.quantized_weights && sharded) ? 0 : held;
  z.masters.count = apart ? z.optimizer_padded : 0;
  z.params16 = {sixteen ? held : 0, half_dtype(o.params)};
  z.grads.count = o.stage >= 2 ? z.shard : T;
  z.received.count = z.partitioned ? z.shard : 0;
  z.stale.count = int64_t{o.max_staleness} * T;
  if (sharded || sixteen) z.slot.count = z.max_unit;
  if (sharded && sixteen) z.slot16 = {z.max_unit, half_dtype(o.params)};
  if (o.quantized_weights && !sharded) {
    z.part_packed = packed_each(z.part_counts, o.quant_block);
    z.quantized = {sum_of(z.part_packed), ZeroDType::packed};
  }
  if (o.quantized_weights && sharded) {
    int64_t at = 0, most = 0;
    for (const std::vector<int64_t>& counts : z.unit_counts) {
      z.unit_packed.push_back(packed_each(counts, o.quant_block));
      z.unit_packed_at.push_back(at);
      at += z.unit_packed.back()[static_cast<size_t>(rank)];
      most = std::max(most, sum_of(z.unit_packed.back()));
    }
    z.quantized = {at, ZeroDType::packed};
    z.slot_packed = {most, ZeroDType::packed};
  }
  if (o.hpz_partition_size > 1) {
    const int k = o.hpz_partition_size, group_rank = rank % k;
    int64_t at = 0;
    for (const FlatRange& u : units) {
      std::vector<int64_t> counts;
      for (int j = 0; j < k; ++j) counts.push_back(flat_partition(u.size(), j, k).size());
      z.secondary_at.push_back(at);
      at += counts[static_cast<size_t>(group_rank)];
      z.secondary_counts.push_back(std::move(counts));
    }
    z.secondary.count = at;
  }
  z.working = replay(z, order);
  return z;
}

// qwZ's packed bytes are the parameters at stage 3 (the shard) and a gather buffer at 1–2.
ZeroMemory ZeroPlan::memory(const ZeroWorking& w) const {
  ZeroMemory m;
  const bool packed_shard = options.stage == 3;
  m.params = params.bytes() + params16.bytes() + secondary.bytes() + (packed_shard ? quantized.bytes() : 0);
  m.master_params = masters.bytes();
  m.grads = grads.bytes();
  m.comm_buffers = received.bytes() + (packed_shard ? 0 : quantized.bytes()) + stale.bytes() + w.exchange_bytes +
                   w.compressor_bytes + 4 * w.grad_pool_floats +
                   w.gather_slots * (slot.bytes() + slot16.bytes() + slot_packed.bytes());
  return m;
}

}  // namespace megatrain
