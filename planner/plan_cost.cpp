#include "planner/plan_cost.h"

#include <algorithm>
#include <vector>

#include "model/flops.h"
#include "model/params.h"
#include "parallel/pipeline_schedule.h"
#include "optim/zero_plan.h"
#include "config/optim_groups.h"
#include "planner/plan_memory.h"

namespace megatrain {
namespace {

// Link and collective times of a group of g ranks, `stride` apart in the rank order.
struct Links {
  const DeviceProfile& d;
  double bw(int g, int stride) const {
    return (g * stride > d.devices_per_node ? d.inter_gbps : d.intra_gbps) * 1e9;
  }
  // Ring all-reduce of `bytes` (reduce-scatter + all-gather).
  double all_reduce(int g, int stride, double bytes) const {
    return g <= 1 ? 0.0 : 2.0 * (g - 1) * d.latency_us * 1e-6 + 2.0 * (g - 1) / g * bytes / bw(g, stride);
  }
  // Reduce-scatter or all-gather of a `bytes` buffer (the whole, not the shard).
  double half(int g, int stride, double bytes) const {
    return g <= 1 ? 0.0 : (g - 1) * d.latency_us * 1e-6 + static_cast<double>(g - 1) / g * bytes / bw(g, stride);
  }
  double all_to_all(int g, int stride, double bytes) const { return half(g, stride, bytes); }
  double p2p(int stride, double bytes) const { return d.latency_us * 1e-6 + bytes / bw(2, stride); }
};

// Context parallelism's attention messages per block and micro-batch (forward and backward), as
// exposed time. ring: cp − 1 key/value blocks forward, and backward the blocks again with their
// gradients (2·(cp − 1) messages), between neighbours tp ranks apart, overlapped with the
// block's attention as far as the device overlaps; all_to_all: q/k/v and the output exchanged
// forward, q/k/v, output, its gradient and dq/dk/dv backward, none of it hidden.
double context_comm(const Config& c, const Links& links, double rows, double overlap) {
  const ParallelConfig& p = c.parallel;
  if (p.cp == 1) return 0.0;
  const LocalDims L = local_dims(c.model, TpCoord{0, p.tp});
  const double D = c.model.head_dim(), f = sizeof(float);
  const double kv = rows * 2 * L.kv_heads * D * f, qkv = rows * (L.heads + 2 * L.kv_heads) * D * f,
               att = rows * L.heads * D * f;
  if (p.cp_comm == CpComm::ring) return 3.0 * (p.cp - 1) * links.p2p(p.tp, kv) * (1.0 - overlap);
  return 3.0 * links.all_to_all(p.cp, p.tp, qkv) + 3.0 * links.all_to_all(p.cp, p.tp, att);
}

}  // namespace

StepCost predict_step(const Config& c, const DeviceProfile& dev) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const Links links{dev};
  const int B = c.train.micro_batch_size, T = c.train.seq_len, vs = p.virtual_stages;
  const int micro = c.train.global_batch_size / (B * p.dp);
  const double rows = double(B) * T / p.cp, C = m.d_model;  // a rank's rows of a micro-batch
  const double flops_per_s = dev.peak_tflops * 1e12 * dev.efficiency;
  const double act_bytes = rows * C * sizeof(float);
  const bool sixteen = c.train.precision != Precision::fp32;

  // One micro-batch through the heaviest virtual stage: compute and the communication inside it.
  double fwd = 0, bwd = 0, tp = 0, ep = 0, cp = 0, heaviest = 0;
  for (int v = 0; v < p.pp * vs; ++v) {
    const StageRange r = virtual_stage_range(c, v);
    double f = 0, extra = 0;
    int moe_blocks = 0;
    for (int l = r.first_layer; l < r.first_layer + r.layers; ++l) {
      const double block = block_forward_flops(m, l, T) * rows / p.tp;
      f += block;
      const bool full = c.train.recompute == Recompute::full &&
                        (c.train.recompute_layers == 0 || l - r.first_layer < c.train.recompute_layers);
      if (full) extra += block;
      if (c.train.recompute == Recompute::selective) extra += 2.0 * 2.0 * T * m.n_heads * m.head_dim() / 2.0 * rows / p.tp;
      moe_blocks += m.moe.is_moe_layer(l) ? 1 : 0;
    }
    if (r.head) f += 2.0 * m.padded_vocab(p.tp) * C * rows / p.tp;
    if (f + extra / 2 <= heaviest) continue;
    heaviest = f + extra / 2;
    fwd = f / flops_per_s;
    bwd = (2.0 * f + extra) / flops_per_s;
    // Two collectives forward, two backward per block (the backward ones overlappable).
    const double one = links.all_reduce(p.tp, 1, act_bytes);
    tp = r.layers * (2.0 * one + 2.0 * one * (p.overlap_tp_comm ? 1.0 - dev.overlap : 1.0));
    const double routed = rows * m.moe.top_k * C * sizeof(float);
    ep = moe_blocks * 4.0 * links.all_to_all(p.ep, p.tp, routed);
    cp = r.layers * context_comm(c, links, rows, dev.overlap);
  }
  const double p2p = p.pp > 1 ? links.p2p(p.tp * p.cp * p.dp, act_bytes / (p.sequence_parallel ? p.tp : 1)) : 0.0;

  // The pipeline: every stage's list played with these step costs.
  const PipeShape shape{p.pp, micro, vs};
  std::vector<std::vector<PipeStep>> lists;
  for (int s = 0; s < p.pp; ++s) lists.push_back(pipeline_schedule(p.pipeline_schedule, s, shape));
  const double f_step = fwd + tp / 2 + ep / 2 + cp / 3 + p2p, b_step = bwd + tp / 2 + ep / 2 + 2 * cp / 3 + p2p;
  const ScheduleStats sim = simulate(lists, shape, StepCosts{f_step, b_step / 2, b_step / 2});
  StepCost out;
  const double n = double(micro) * vs;
  out.compute = n * (fwd + bwd);
  out.tp = n * tp, out.ep = n * ep, out.cp = n * cp, out.pp = n * 2 * p2p;
  out.bubble = std::max(0.0, sim.makespan - n * (f_step + b_step));
  // [Note: CPU ranks share cores]: the node's work, R·threads core-seconds for each second a rank is
  // busy in its pipeline steps, over its cores. A CPU rank's messages are copied and reduced by its
  // own cores (the profile's overlap is 0), so the tp/ep/pp traffic inside the steps is work too.
  // GPU profiles have cores = 0: every device computes alone.
  const double world = double(p.tp) * p.pp * p.cp * p.dp;
  const double share = dev.cores > 0 ? std::min(world, double(dev.devices_per_node)) * dev.threads / dev.cores : 0.0;
  out.cores = std::max(0.0, share * (out.compute + out.tp + out.ep + out.cp + out.pp) - sim.makespan);

  // Data parallelism over the heaviest pipeline rank's parameters.
  double dense = 0, experts = 0;
  for (int s : heaviest_pp_candidates(c)) {
    std::vector<StageRange> ranges;
    for (int k = 0; k < vs; ++k) ranges.push_back(virtual_stage_range(c, k * p.pp + s));
    const ParamLayout layout = gpt_param_layout(m, TpCoord{0, p.tp}, p.sequence_parallel, ranges, EpCoord{0, p.ep});
    if (double(dense_end(layout)) + double(layout.total() - dense_end(layout)) <= dense + experts) continue;
    dense = double(dense_end(layout));
    experts = double(layout.total() - dense_end(layout));
  }
  const double g_bytes = p.grad_reduce_dtype == Precision::bf16 ? 2 : 4, p_bytes = sixteen ? 2 : 4;
  // A ZeRO state's reductions over g ranks `stride` apart: what backward may hide (gradient
  // reductions issued per bucket; stage 3's prefetched gathers) and what it may not (the gather
  // of updated parameters after the step, stages 1–2).
  double hideable = 0, exposed = 0;
  const ZeroTraffic traffic = zero_traffic(zero_options(c));
  const auto zero_comm = [&](int g, int stride, double floats) {
    const double grads = floats * g_bytes, params = floats * p_bytes;
    const double reduce = traffic.grads_reduce_scattered ? links.half(g, stride, grads) : links.all_reduce(g, stride, grads);
    hideable += (traffic.grads_per_micro_batch ? micro : 1.0) * reduce;
    if (traffic.params_gathered_after_update) exposed += links.half(g, stride, params);
    hideable += micro * traffic.param_gathers_per_micro_batch * links.half(g, stride, params);
  };
  zero_comm(p.dp * p.cp, p.tp, dense);  // cp ranks hold the same dense parameters
  if (experts > 0) zero_comm(p.dp / p.ep * p.cp, p.tp, experts);
  const bool overlaps = p.overlap_grad_reduce || traffic.param_gathers_per_micro_batch > 0;
  const double hidden = overlaps ? std::min(dev.overlap * hideable, dev.overlap * n * bwd) : 0.0;
  out.dp = exposed + hideable - hidden;

  const double updated =
      traffic.sharded_update ? dense / (p.dp * p.cp) + experts / (p.dp / p.ep * p.cp) : dense + experts;
  out.optimizer = updated * 32.0 / (dev.memory_gbps * 1e9);  // params, grads, m, v read; params, m, v written

  out.step = sim.makespan + out.cores + out.dp + out.optimizer;
  const double tokens = double(c.train.global_batch_size) * T;
  out.tokens_per_s = tokens / out.step;
  out.mfu = model_flops_per_token(m, T) * tokens / (out.step * world * dev.peak_tflops * 1e12);
  return out;
}

}  // namespace megatrain
