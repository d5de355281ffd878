#include "trainer/plan_memory.h"

#include <algorithm>
#include <vector>

#include "kernels/check.h"
#include "model/stage.h"
#include "parallel/block_quant.h"
#include "parallel/grad_buckets.h"
#include "parallel/pipeline.h"
#include "parallel/pipeline_schedule.h"
#include "trainer/rank_run.h"

namespace megatrain {
namespace {

// The state a measuring stage is built over: it never runs, so nothing is ever asked of it.
class NoUnitState final : public UnitState {
 public:
  float* unit_params(int) override { throw Error("a measuring stage does not run"); }
  float* unit_grads(int) override { throw Error("a measuring stage does not run"); }
};

// A model chunk's units in its ZeRO state: [first_unit, last_unit], and which ends it holds.
struct PlanChunk {
  int first_unit = 0, last_unit = 0;
  bool embedding = false, head = false, shares_embedding = false;
};

// What ZeroState (parallel/zero.h) allocates over `units` on one of `dp` ranks, replaying the
// step's use of its working buffers. `chunk_breaks`: the first units of chunks after the first.
struct ZeroSizing {
  const std::vector<FlatRange>& units;
  int dp;
  int stage;
  int64_t bucket_floats;
  bool overlap, sixteen_bit;
  std::vector<int> chunk_breaks;
  int micro_batches;
  std::vector<PlanChunk> chunks;  // in order; empty units (a chunk without any) are left out
  int held_bucket_unit = -1;  // a unit of the [Note: held bucket], −1: none
  int extra_gather_slots = 0;  // units a pass keeps acquired besides the current one (tied head)
  // [Note: ZeRO++] in parallel/zero.h
  bool quantized_weights = false, quantized_gradients = false;
  int hpz_partition_size = 1;
  int64_t quant_block = 256;
};

// qwZ's packed bytes (parallel/block_quant.h) of rank `rank`'s part of range r, and of every rank's.
int64_t packed_part(const ZeroSizing& z, FlatRange r, int64_t total, int rank) {
  return quant_packed_bytes(flat_intersect(r, flat_partition(total, rank, z.dp)).size(), z.quant_block);
}
int64_t packed_all(const ZeroSizing& z, FlatRange r, int64_t total) {
  int64_t bytes = 0;
  for (int k = 0; k < z.dp; ++k) bytes += packed_part(z, r, total, k);
  return bytes;
}

// qgZ's working copies of bucket range b while its exchange is in flight (rank 0): the packed part
// for each rank, and each rank's packed copy of rank 0's part.
int64_t qgz_copies(const ZeroSizing& z, FlatRange b, int64_t total) {
  return packed_all(z, b, total) + z.dp * packed_part(z, b, total, 0);
}

// Stage-2/3 gradient working buffers, replaying ZeroState::grad_buffer_take over the order a
// stage's backward asks for and hands back unit gradients (model/stage.h [Note: unit order]): per
// chunk, last first, the head unit (with the tied embedding's, which the head writes first and the
// embedding's backward finishes last), the blocks from the last, then the embedding. A bucket is
// issued when its units are done (overlap), all complete at the chunk's micro_batch_end, the held
// bucket keeps its buffer for the step. A free buffer is reused, first freed first, when large
// enough; at kGradBuffers the oldest issued bucket completes to free one. Returns the floats made
// and, with qgZ, the peak bytes of the working copies of the exchanges in flight.
struct GradPool {
  int64_t floats = 0, qgz_peak = 0;
};
GradPool grad_pool(const ZeroSizing& z, const GradBuckets& buckets) {
  const int64_t total = z.units.back().end;
  int64_t qgz = 0;
  GradPool out;
  std::vector<bool> flying(static_cast<size_t>(buckets.size()));  // issued and not yet complete
  const auto issue = [&](int b) {
    flying[static_cast<size_t>(b)] = true;
    if (z.quantized_gradients) qgz += qgz_copies(z, buckets[b].range, total);
    out.qgz_peak = std::max(out.qgz_peak, qgz);
  };
  constexpr size_t kGradBuffers = 4;  // parallel/zero.cpp grad_buffer_take
  const int held = z.held_bucket_unit >= 0 ? buckets.bucket_of(z.held_bucket_unit) : -1;
  std::vector<int64_t> pool;  // buffer sizes
  std::vector<int> free_list, buffer(static_cast<size_t>(buckets.size()), -1), pending(buffer.size());
  std::vector<bool> issued(buffer.size());
  const auto complete = [&](int b) {
    const auto k = static_cast<size_t>(b);
    if (flying[k] && z.quantized_gradients) qgz -= qgz_copies(z, buckets[b].range, total);
    flying[k] = false;
    if (buffer[k] >= 0) free_list.push_back(buffer[k]);
    buffer[k] = -1;
  };
  const auto take = [&](int unit) {
    const int b = buckets.bucket_of(unit);
    if (buffer[static_cast<size_t>(b)] >= 0) return;
    const int64_t n = buckets[b].range.size();
    for (;;) {
      const auto fit = std::ranges::find_if(free_list, [&](int id) { return pool[static_cast<size_t>(id)] >= n; });
      if (fit != free_list.end()) {
        buffer[static_cast<size_t>(b)] = *fit;
        free_list.erase(fit);
        return;
      }
      if (pool.size() < kGradBuffers) break;
      int oldest = -1;
      for (int o = 0; o < buckets.size() && oldest < 0; ++o)
        if (issued[static_cast<size_t>(o)] && buffer[static_cast<size_t>(o)] >= 0) oldest = o;
      if (oldest < 0) break;
      complete(oldest);
    }
    pool.push_back(n);
    buffer[static_cast<size_t>(b)] = static_cast<int>(pool.size()) - 1;
  };
  const auto done = [&](int unit) {
    const int b = buckets.bucket_of(unit);
    if (--pending[static_cast<size_t>(b)] == 0 && z.overlap && b != held) {
      issued[static_cast<size_t>(b)] = true;
      issue(b);
    }
  };
  const int chunks = static_cast<int>(z.chunks.size());
  for (int m = 0; m < std::min(z.micro_batches, 3); ++m)
    for (int k = chunks - 1; k >= 0; --k) {
      const PlanChunk& ch = z.chunks[static_cast<size_t>(k)];
      const int first = buckets.bucket_of(ch.last_unit), end = buckets.bucket_of(ch.first_unit) + 1;
      for (int b = first; b < end; ++b) {
        pending[static_cast<size_t>(b)] = buckets[b].num_units();
        issued[static_cast<size_t>(b)] = false;
      }
      const int blocks_begin = ch.first_unit + (ch.embedding ? 1 : 0);
      const int blocks_end = ch.last_unit + 1 - (ch.head ? 1 : 0);
      if (ch.head) {
        take(ch.last_unit);
        if (ch.shares_embedding) take(ch.first_unit);
        done(ch.last_unit);
      }
      for (int u = blocks_end - 1; u >= blocks_begin; --u) take(u), done(u);
      if (ch.embedding) {
        if (!ch.shares_embedding) take(ch.first_unit);
        done(ch.first_unit);
      }
      for (int b = first; b < end; ++b)
        if (b != held && !issued[static_cast<size_t>(b)]) issued[static_cast<size_t>(b)] = true, issue(b);
      for (int b = first; b < end; ++b)
        if (b != held) complete(b);
    }
  for (int64_t n : pool) out.floats += n;
  return out;
}

// qwZ and hpZ on top of zero_memory's plain state (rank 0's parts): the masters are apart from
// what compute reads; stage 3 holds its packed parts instead of float32 ones, and gathers into
// packed slots besides the float32 ones; stages 1–2 gather every rank's packed partition; hpZ keeps
// a 1/k slice of each unit.
void add_zeropp(ZeroMemory& m, const ZeroSizing& z, int64_t total, int slots) {
  const int64_t f = sizeof(float);
  if (z.quantized_weights) {
    m.master_params = (z.stage == 0 ? total : flat_shard_size(total, z.dp)) * f;
    if (z.stage < 3) {
      m.comm_buffers += packed_all(z, {0, total}, total);
    } else {
      int64_t shard = 0, most = 0;
      for (const FlatRange& u : z.units) {
        shard += packed_part(z, u, total, 0);
        most = std::max(most, packed_all(z, u, total));
      }
      m.params = shard;
      m.comm_buffers += slots * most;
    }
  }
  if (z.hpz_partition_size > 1)
    for (const FlatRange& u : z.units) m.params += flat_partition(u.size(), 0, z.hpz_partition_size).size() * f;
}

ZeroMemory zero_memory(const ZeroSizing& z) {
  const int64_t f = sizeof(float), h = sizeof(uint16_t);
  const int64_t total = z.units.empty() ? 0 : z.units.back().end;
  const int64_t shard = flat_shard_size(total, z.dp);
  const int64_t held = z.stage == 3 ? shard : total;
  ZeroMemory m;
  m.params = z.sixteen_bit ? held * h : held * f;
  m.master_params = z.sixteen_bit ? (z.stage == 0 ? total : shard) * f : 0;
  m.grads = (z.stage >= 2 ? shard : total) * f;
  if (z.stage >= 1) m.comm_buffers += shard * f;
  if (z.units.empty()) return m;
  const GradBuckets buckets(z.units, z.bucket_floats, z.chunk_breaks);
  if (z.stage >= 2) {
    const GradPool pool = grad_pool(z, buckets);
    m.comm_buffers += pool.floats * f + pool.qgz_peak;
  } else if (z.stage == 1 && z.quantized_gradients) {
    // Stage 1 issues a chunk's buckets on its last micro-batch and completes them together.
    int64_t peak = 0;
    for (const PlanChunk& ch : z.chunks) {
      int64_t chunk = 0;
      for (int b = buckets.bucket_of(ch.last_unit); b <= buckets.bucket_of(ch.first_unit); ++b)
        if (z.held_bucket_unit < 0 || b != buckets.bucket_of(z.held_bucket_unit))
          chunk += qgz_copies(z, buckets[b].range, z.units.back().end);
      peak = std::max(peak, chunk);
    }
    m.comm_buffers += peak;
  }
  if (z.stage == 3 || z.sixteen_bit) {
    // Unit-sized slots: the unit in use, the next one being gathered (stage 3), and those a pass
    // keeps acquired (the tied embedding, read again by the head).
    int64_t max_unit = 0;
    for (const FlatRange& u : z.units) max_unit = std::max(max_unit, u.size());
    const int slots = (z.stage == 3 ? 2 : 1) + z.extra_gather_slots;
    m.comm_buffers += slots * max_unit * (f + (z.sixteen_bit && z.stage == 3 ? h : 0));
    add_zeropp(m, z, total, slots);
  } else {
    add_zeropp(m, z, total, 0);
  }
  return m;
}

std::vector<int> breaks_of(const std::vector<int>& bounds) {
  std::vector<int> out;
  for (size_t k = 1; k + 1 < bounds.size(); ++k)
    if (bounds[k] > 0 && bounds[k] < bounds.back() && (out.empty() || out.back() != bounds[k])) out.push_back(bounds[k]);
  return out;
}

}  // namespace

PlannedMemory plan_memory(const Config& c, int pp_rank) {
  const ParallelConfig& p = c.parallel;
  MT_CHECK(p.dp > 0 && c.train.global_batch_size > 0, "plan_memory needs a resolved config (resolve_config)");
  const int micro = c.train.global_batch_size / (c.train.micro_batch_size * p.dp);
  std::vector<StageRange> ranges;
  for (int k = 0; k < p.virtual_stages; ++k) ranges.push_back(virtual_stage_range(c, k * p.pp + pp_rank));
  const std::vector<PipeStep> steps =
      pipeline_schedule(p.pipeline_schedule, pp_rank, PipeShape{p.pp, micro, p.virtual_stages});
  const ParamLayout layout =
      gpt_param_layout(c.model, TpCoord{0, p.tp}, p.sequence_parallel, ranges, EpCoord{0, p.ep});
  const bool sixteen = c.train.precision != Precision::fp32;
  const auto bucket_floats =
      std::max<int64_t>(1, static_cast<int64_t>(p.bucket_size_mb * 1024.0 * 1024.0 / sizeof(float)));

  // Dense parameters: every chunk's units, one ZeRO state over the dp group (RankRun's zero).
  const std::vector<FlatRange> units = gpt_param_units(layout, ranges);
  std::vector<int> bounds{0}, expert_bounds{0};
  for (const StageRange& r : ranges) {
    bounds.push_back(bounds.back() + static_cast<int>(gpt_param_units(layout, r).size()));
    expert_bounds.push_back(expert_bounds.back() + static_cast<int>(moe_expert_units(layout, {r}).size()));
  }
  const bool embedding = ranges.front().embedding, head = ranges.back().head;
  const bool shares_embedding = c.model.tie_embeddings && embedding && head;
  ZeroSizing dense{units, p.dp, p.zero_stage, bucket_floats, p.overlap_grad_reduce, sixteen,
                   std::vector<int>(bounds.begin() + 1, bounds.end() - 1), micro, {}};
  for (size_t k = 0; k < ranges.size(); ++k)
    if (bounds[k + 1] > bounds[k])
      dense.chunks.push_back({bounds[k], bounds[k + 1] - 1, ranges[k].embedding, ranges[k].head,
                              c.model.tie_embeddings && ranges[k].embedding && ranges[k].head});
  if (c.model.tie_embeddings && p.pp > 1 && (embedding || head)) {
    const size_t i = layout.index_of("embed.wte");
    const int64_t at = layout.offset(i);
    for (size_t u = 0; u < units.size(); ++u)
      if (units[u].begin <= at && at < units[u].end) dense.held_bucket_unit = static_cast<int>(u);
  }
  dense.extra_gather_slots = shares_embedding ? 1 : 0;
  dense.quantized_weights = p.zero_quantized_weights;
  dense.quantized_gradients = p.zero_quantized_gradients;
  dense.hpz_partition_size = p.zero_hpz_partition_size;
  dense.quant_block = p.zero_quant_block;
  const ZeroMemory z = zero_memory(dense);
  const int64_t dense_opt = p.zero_stage == 0 ? units.back().end : flat_shard_size(units.back().end, p.dp);

  PlannedMemory out;
  out.pp_rank = pp_rank;
  MemoryMetrics& m = out.bytes;
  m.params = z.params, m.master_params = z.master_params, m.grads = z.grads, m.comm_buffers = z.comm_buffers;
  m.optimizer = 2 * dense_opt * static_cast<int64_t>(sizeof(float));  // AdamW's m and v

  // Expert parameters: their own ZeRO state over the expert-data-parallel group (dp / ep ranks).
  std::vector<FlatRange> experts = moe_expert_units(layout, ranges);
  if (!experts.empty()) {
    const int64_t begin = dense_end(layout);
    for (FlatRange& u : experts) u = {u.begin - begin, u.end - begin};
    ZeroSizing e{experts, p.dp / p.ep, p.zero_stage, bucket_floats, p.overlap_grad_reduce, sixteen,
                 breaks_of(expert_bounds), micro, {}};
    for (size_t k = 0; k + 1 < expert_bounds.size(); ++k)
      if (expert_bounds[k + 1] > expert_bounds[k]) e.chunks.push_back({expert_bounds[k], expert_bounds[k + 1] - 1});
    const ZeroMemory ez = zero_memory(e);
    m.params += ez.params, m.master_params += ez.master_params, m.grads += ez.grads;
    m.comm_buffers += ez.comm_buffers;
    const int64_t total = experts.back().end;
    m.optimizer += 2 * (p.zero_stage == 0 ? total : flat_shard_size(total, p.dp / p.ep)) *
                   static_cast<int64_t>(sizeof(float));
  }

  // Activations: each chunk's stage planned on a measuring arena, with the slots the schedule holds.
  NoUnitState none;
  const TpOptions tp_options{p.sequence_parallel, p.overlap_tp_comm};
  const int64_t rows = int64_t{c.train.micro_batch_size} * c.train.seq_len;
  for (size_t k = 0; k < ranges.size(); ++k) {
    StageOptions options{peak_held(steps, static_cast<int>(k)), splits_backward(steps), c.train.recompute,
                         c.train.recompute_layers, c.train.precision};
    options.measure_only = true;
    const Stage stage(c.model, c.train.micro_batch_size, c.train.seq_len, layout, ranges[k], options, none,
                      TensorParallel(0, p.tp, tp_options, rows, c.model.d_model));
    m.activations += static_cast<int64_t>(stage.activation_bytes());
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
