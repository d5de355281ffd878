// The planner's step-time model (planner/plan_cost.h) on made-up devices whose answers are known.
#include <gtest/gtest.h>

#include "config/config.h"
#include "model/flops.h"
#include "planner/plan_cost.h"
#include "planner/plan_memory.h"

namespace megatrain {
namespace {

Config tiny(const std::string& extra) {
  Config c = load_config_text(R"([model]
n_layers = 4
d_model = 128
n_heads = 4
vocab_size = 256
max_seq_len = 128
[train]
seq_len = 128
micro_batch_size = 1
global_batch_size = 8
)" + extra, "tiny");
  return c;
}

// No communication cost at all (infinite links): a step is its compute plus the pipeline bubble.
DeviceProfile ideal() {
  DeviceProfile d;
  d.peak_tflops = 1e-3, d.efficiency = 1, d.memory_gib = 1, d.memory_gbps = 1e12;
  d.intra_gbps = d.inter_gbps = 1e12, d.latency_us = 0, d.devices_per_node = 8;
  return d;
}

TEST(PlanCost, ComputeIsModelFlopsOverPeakTimesEfficiency) {
  Config c = tiny("");
  resolve_config(c, 1);
  const StepCost t = predict_step(c, ideal());
  // The model FLOPs of 8 × 128 tokens (head included) over 1 GFLOP/s.
  const double flops = model_flops_per_token(c.model, 128) * 8 * 128;
  EXPECT_NEAR(t.compute, flops / 1e9, 0.02 * flops / 1e9);
  EXPECT_NEAR(t.bubble, 0.0, 1e-9);
  EXPECT_NEAR(t.step, t.compute, 1e-3 * t.step);
}

// 1F1B over p = 4 stages and m = 8 micro-batches idles (p − 1) / (m + p − 1) of the step.
TEST(PlanCost, BubbleIsTheSchedules) {
  Config c = tiny("[parallel]\npp = 4\n");
  resolve_config(c, 4);
  const StepCost t = predict_step(c, ideal());
  EXPECT_NEAR(t.bubble / t.step, 3.0 / 11.0, 0.05);
  // Interleaving two chunks per rank shrinks it.
  Config v = tiny("[parallel]\npp = 2\nvirtual_stages = 2\npipeline_schedule = \"interleaved\"\n");
  Config one = tiny("[parallel]\npp = 2\n");
  resolve_config(v, 2), resolve_config(one, 2);
  EXPECT_LT(predict_step(v, ideal()).bubble, predict_step(one, ideal()).bubble);
}

// Data parallelism adds the gradient all-reduce: 2 (g − 1) / g of the gradient bytes over the link;
// a slower inter-node link makes the same group slower once it spans nodes.
TEST(PlanCost, DataParallelAllReduceUsesTheLinkTheGroupSpans) {
  DeviceProfile d = ideal();
  d.intra_gbps = 1, d.inter_gbps = 0.1, d.devices_per_node = 2;
  Config two = tiny("[parallel]\noverlap_grad_reduce = false\n"), four = two;
  resolve_config(two, 2), resolve_config(four, 4);
  const StepCost a = predict_step(two, d), b = predict_step(four, d);
  EXPECT_GT(a.dp, 0.0);
  EXPECT_GT(b.dp, 5.0 * a.dp);  // 10× slower link, 1.5× / 1.0× the volume
}

// [Note: CPU ranks share cores] Four data-parallel ranks, one thread each, on two cores: share =
// 4 · 1 / 2 = 2, so the step is twice a rank's compute, the extra half of it waiting for cores. With
// four cores (or as GPUs, cores = 0) nobody waits; two threads a rank on four cores is share 2 again.
TEST(PlanCost, RanksThatOutnumberTheCoresShareThem) {
  Config c = tiny("[parallel]\noverlap_grad_reduce = false\n");
  resolve_config(c, 4);
  DeviceProfile d = ideal();
  d.cores = 2, d.threads = 1;
  const StepCost two = predict_step(c, d);
  EXPECT_NEAR(two.cores, two.compute, 1e-9 * two.compute);
  EXPECT_NEAR(two.step, 2.0 * two.compute, 1e-6 * two.step);
  d.cores = 4;
  const StepCost four = predict_step(c, d);
  EXPECT_EQ(four.cores, 0.0);
  EXPECT_DOUBLE_EQ(four.compute, two.compute);
  d.cores = 0;
  EXPECT_EQ(predict_step(c, d).cores, 0.0);
  d.cores = 4, d.threads = 2;
  EXPECT_NEAR(predict_step(c, d).cores, two.cores, 1e-9 * two.cores);
}

// A CPU rank's tensor-parallel all-reduces are copied and reduced by its own cores, so they share
// the cores as compute does. tp 2 × dp 2 on two cores, 1 GB/s: one all-reduce of a (128, 128) float
// activation over 2 ranks moves 2 · 1/2 · 65536 B = 65.536 µs; 4 per block (none hidden: overlap 0),
// 4 blocks, 4 micro-batches: tp = 64 × 65.536 µs. No pipeline, so makespan = compute + tp, and
// share 2 doubles it: the ranks wait compute + tp for cores.
TEST(PlanCost, CpuTensorParallelTrafficSharesTheCores) {
  Config c = tiny("[parallel]\ntp = 2\noverlap_grad_reduce = false\n");
  resolve_config(c, 4);
  DeviceProfile d = ideal();
  d.intra_gbps = d.inter_gbps = 1, d.cores = 2;
  const StepCost t = predict_step(c, d);
  EXPECT_NEAR(t.tp, 64 * 65.536e-6, 1e-12);
  EXPECT_NEAR(t.cores, t.compute + t.tp, 1e-9 * t.cores);
}

// Pipeline ranks idle in the bubble leave their cores to the others. 1F1B over p = 4 stages and
// m = 8 micro-batches takes (m + p − 1) = 11 step pairs where a rank computes 8: makespan = 11/8 of
// the compute. On two cores (share 2) the node's work, 2 × compute, is longer: the ranks wait
// 2 − 11/8 = 5/8 of the compute for cores. On three (share 4/3: 10.7/8 < 11/8) the bubble absorbs it.
TEST(PlanCost, PipelineBubbleAbsorbsCoreSharing) {
  Config c = tiny("[parallel]\npp = 4\n");
  resolve_config(c, 4);
  DeviceProfile d = ideal();
  d.cores = 2;
  const StepCost t = predict_step(c, d);
  EXPECT_NEAR(t.bubble, 3.0 / 8.0 * t.compute, 1e-6 * t.compute);
  EXPECT_NEAR(t.cores, 5.0 / 8.0 * t.compute, 1e-6 * t.compute);
  EXPECT_NEAR(t.step, 2.0 * t.compute, 1e-6 * t.step);
  d.cores = 3;
  const StepCost u = predict_step(c, d);
  EXPECT_EQ(u.cores, 0.0);
  EXPECT_NEAR(u.step, 11.0 / 8.0 * u.compute, 1e-6 * u.step);
}

// Context parallelism: each cp rank computes 1/cp of the tokens and holds 1/cp of the activations;
// the ring sends 3·(cp − 1) key/value blocks per block and micro-batch (forward, then the
// blocks again with their gradients) and all_to_all exchanges q/k/v and the output, each taking
// what the link takes for its bytes.
TEST(PlanCost, ContextParallelSplitsComputeAndActivationsAndPaysItsMessages) {
  DeviceProfile d = ideal();
  d.intra_gbps = 1, d.latency_us = 0, d.overlap = 0;
  Config one = tiny("[parallel]\noverlap_grad_reduce = false\n"), ring = tiny("[parallel]\ncp = 2\n"),
         a2a = tiny("[parallel]\ncp = 2\ncp_comm = \"all_to_all\"\n");
  resolve_config(one, 1), resolve_config(ring, 2), resolve_config(a2a, 2);
  const StepCost t1 = predict_step(one, d), t2 = predict_step(ring, d), t3 = predict_step(a2a, d);
  EXPECT_NEAR(t2.compute, t1.compute / 2, 1e-3 * t1.compute);
  EXPECT_EQ(t1.cp, 0.0);
  // Per block and micro-batch 3 messages of 64 rows × (k and v: 2 × 4 heads × 32) × 4 bytes; 4 blocks,
  // 8 micro-batches.
  const double kv = 64.0 * 2 * 128 * 4;
  EXPECT_NEAR(t2.cp, 8 * 4 * 3 * kv / 1e9, 1e-9);
  // all_to_all: 3 exchanges of q/k/v (64 rows × 12 heads × 32) and 3 of the output (64 × 128), half
  // of each leaving a rank at cp = 2.
  EXPECT_NEAR(t3.cp, 8 * 4 * 3 * 0.5 * (64.0 * 12 * 32 * 4 + 64.0 * 128 * 4) / 1e9, 1e-9);
  const double act1 = double(plan_memory(one).bytes.activations), act2 = double(plan_memory(ring).bytes.activations);
  EXPECT_LT(act2, 0.6 * act1);
  EXPECT_GT(act2, 0.5 * act1);  // the ring's buffers on top of half the rows
}

}  // namespace
}  // namespace megatrain
