// ZeroState on real ranks with a real (tiny) model driving its hooks: the model-state bytes each
// rank holds equal the ZeRO paper's table, the bytes each stage moves per step equal the
// theoretical volume, reductions start during backward only when overlap is on, and every stage
// gives the gradient of a plain single-process model and the AdamW update computed from it here; at
// 16 bits, the copy AdamW writes in its update's pass is bitwise the rounding made after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/zero_state.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

constexpr int kB = 2, kT = 8, kMicro = 2;
constexpr float kLr = 1e-2f;

// Micro-batch m of data-parallel rank r reads token stream r·kMicro + m.
void forward_backward(Stage& stage, int rank, int m) {
  const auto in = test::tokens(kB * kT, stage.config().vocab_size, static_cast<uint32_t>(rank * kMicro + m));
  const auto tg = test::tokens(kB * kT, stage.config().vocab_size, static_cast<uint32_t>(100 + rank * kMicro + m));
  ForwardOptions o;
  o.grad = LossGrad::in_place;
  o.dloss_scale = 1.0f;
  stage.forward(0, MicroBatch{in.data(), tg.data(), o});
  stage.backward(0);
}

// One data-parallel replica: ZeRO state, the model stage reading through it, AdamW over its range.
struct Replica {
  ParamLayout layout;
  ZeroState zero;
  Stage model;
  AdamW opt;
  Replica(const ModelConfig& cfg, const Comm& dp, int stage, int64_t bucket_floats, bool overlap,
          Precision params = Precision::fp32)
      : layout(gpt_param_layout(cfg)),
        zero(gpt_param_units(layout, whole_model(cfg)), dp, ZeroOptions{stage, bucket_floats, overlap, params}),
        model(cfg, kB, kT, layout, whole_model(cfg), StageOptions{}, zero,
              TensorParallel(int64_t{kB} * kT, cfg.d_model)),
        opt(model.layout(), AdamWOptions{}, zero.optimizer_range(), zero.optimizer_padded()) {
    init_params_range(model.layout(), zero.held_params(), zero.held_params_range(), cfg, 7);
    zero.params_written();
  }
  // This rank's micro-batches: afterwards optimizer_grads() holds the reduced gradient.
  void accumulate(int rank) {
    zero.step_begin();
    for (int m = 0; m < kMicro; ++m) {
      zero.micro_batch_begin(m + 1 == kMicro);
      forward_backward(model, rank, m);
      zero.micro_batch_end();
    }
  }
  double update() {
    const double norm = grad_norm(Stream::cpu(), {zero.grad_part()});
    opt.step(zero.optimizer_params(), zero.optimizer_grads(), kLr, norm, 1.0f, zero.optimizer_params16());
    zero.step_end();
    return norm;
  }
  double step(int rank) {
    accumulate(rank);
    return update();
  }
};

int64_t units_total(const ModelConfig& cfg) { return gpt_param_layout(cfg).total(); }

class ZeroStages : public ::testing::TestWithParam<int> {};

// ZeRO paper, Figure 1, for fp32 training (4-byte parameters and gradients, 8 bytes of Adam moments
// per parameter): Ψ parameters per rank, Ψ/N = ceil(Ψ/N) padded.
//   stage 0: 4Ψ + 4Ψ + 8Ψ     stage 1: 4Ψ + 4Ψ + 8Ψ/N     stage 2: 4Ψ + 4Ψ/N + 8Ψ/N     stage 3: 16Ψ/N
TEST_P(ZeroStages, ModelStateBytesPerRankFollowTheZeroTable) {
  const int stage = GetParam();
  const Comm world = Comm::world();
  const ModelConfig cfg = test::gpt2_like();
  Replica r(cfg, world, stage, 256, true);
  r.step(world.rank());
  const int64_t psi = units_total(cfg), n = world.size(), per_rank = (psi + n - 1) / n;
  const int64_t p = stage == 3 ? per_rank : psi, g = stage >= 2 ? per_rank : psi, o = stage >= 1 ? per_rank : psi;
  const ZeroMemory mem = r.zero.memory();
  EXPECT_EQ(mem.params, 4 * p);
  EXPECT_EQ(mem.grads, 4 * g);
  EXPECT_EQ(r.opt.state_bytes(), 8 * o);
  // Shards are padded: every rank holds ceil(Ψ/N) even where its partition is shorter, and the
  // partitions tile the Ψ floats exactly.
  EXPECT_EQ(r.zero.shard_floats(), per_rank);
  int64_t covered = r.zero.partition().size();
  world.all_reduce(&covered, 1).wait();
  EXPECT_EQ(covered, psi);
}

// Bytes a rank moves in one step (parallel/comm.h: all-reduce 2(p−1)S/p, reduce-scatter and
// all-gather (p−1)S/p), S = 4T bytes for the whole flat buffer of T floats, M micro-batches:
//   stage 0: one all-reduce of the gradients                       2(p−1)/p · 4T
//   stage 1: reduce-scatter + all-gather of the parameters         2(p−1)/p · 4T  (+ the norm)
//   stage 2: a reduce-scatter per micro-batch + the all-gather     (M+1)(p−1)/p · 4T  (+ the norm)
//   stage 3: per micro-batch: gather every unit for forward, every unit whose weights backward
//            reads (all but an untied embedding) for backward, reduce-scatter the gradients
//                                                                  M(p−1)/p · (4T + 4T_bwd + 4T)  (+ the norm)
// The norm is one double all-reduced (stages ≥ 1): 2(p−1)/p · 8. All sizes here are multiples of
// 16 floats and p ∈ {1, 2, 4}, so the per-call integer division is exact.
TEST_P(ZeroStages, BytesMovedPerStepEqualTheTheoreticalVolume) {
  const int stage = GetParam();
  const Comm world = Comm::world();
  const int64_t p = world.size();
  if (p == 3) GTEST_SKIP() << "3 does not divide the 64-byte units; the formula is exact for 1, 2, 4";
  for (const ModelConfig& cfg : {test::gpt2_like(), test::llama_like()}) {
    Replica r(cfg, world, stage, 300, true);
    const int64_t T = units_total(cfg);
    const FlatRange emb = r.model.units()[0];
    const int64_t T_bwd = cfg.tie_embeddings ? T : T - emb.size();
    const int64_t norm = stage >= 1 ? 2 * (p - 1) * 8 / p : 0;
    const int64_t expected[4] = {2 * (p - 1) * 4 * T / p, 2 * (p - 1) * 4 * T / p + norm,
                                 (kMicro + 1) * (p - 1) * 4 * T / p + norm,
                                 kMicro * (p - 1) * (4 * T + 4 * T_bwd + 4 * T) / p + norm};
    world.reset_stats();
    r.step(world.rank());
    EXPECT_EQ(world.stats().bytes_moved, expected[stage]) << (cfg.tie_embeddings ? "tied" : "untied");
  }
}

// [Note: bucket overlap] With overlap on, every bucket's reduction is issued from inside backward
// (before micro_batch_end); with it off, none is. Stage 3 also gathers each unit backward reads
// (all of them with the tied embedding of this model).
TEST_P(ZeroStages, ReductionsStartInsideBackwardOnlyWithOverlap) {
  const int stage = GetParam();
  const Comm world = Comm::world();
  for (bool overlap : {true, false}) {
    Replica r(test::gpt2_like(), world, stage, 200, overlap);
    ASSERT_GE(r.zero.buckets().size(), 2);
    r.zero.step_begin();
    r.zero.micro_batch_begin(true);
    world.reset_stats();
    const auto in = test::tokens(kB * kT, 37, 1), tg = test::tokens(kB * kT, 37, 2);
    ForwardOptions o;
    o.grad = LossGrad::in_place;
    o.dloss_scale = 1.0f;
    r.model.forward(0, MicroBatch{in.data(), tg.data(), o});
    const int64_t after_forward = world.stats().calls;
    r.model.backward(0);
    const int64_t in_backward = world.stats().calls - after_forward;
    r.zero.micro_batch_end();
    const int64_t buckets = r.zero.buckets().size();
    const int64_t gathers = stage == 3 ? static_cast<int64_t>(r.model.units().size()) : 0;
    EXPECT_EQ(in_backward, gathers + (overlap ? buckets : 0)) << (overlap ? "overlap on" : "overlap off");
    EXPECT_EQ(world.stats().calls - after_forward, gathers + buckets);
  }
}

// One process without ZeRO: a plain model holding every parameter runs all p·M micro-batches
// (rank r's micro-batch m reads stream r·M + m), accumulating the step's gradient.
struct Serial {
  GptModel model;
  Serial(const ModelConfig& cfg, int ranks) : model(cfg, kB, kT) {
    model.init(7);
    model.zero_grads();
    for (int rank = 0; rank < ranks; ++rank)
      for (int m = 0; m < kMicro; ++m) forward_backward(model.stage(), rank, m);
  }
};

// The parameters after one AdamW step from zero moments (t = 1) on the gradient `grads` of global
// norm `norm`, in double from PyTorch's AdamW with torch.nn.utils.clip_grad_norm_ first, at
// AdamWOptions{}'s settings (decay on matrices only), for the flat elements of `range`:
//   g ← g · min(1, clip / (‖g‖ + 1e-6));  p ← p − lr·wd·p;  m = (1−β1)·g,  v = (1−β2)·g²;
//   m̂ = m / (1−β1),  v̂ = v / (1−β2);  p ← p − lr·m̂ / (√v̂ + ε).
// Elements outside `range` are 0.
std::vector<double> adamw_first_step(const ParamLayout& layout, const float* params, const float* grads, double norm,
                                     FlatRange range) {
  const AdamWOptions o;
  const double b1 = o.beta1, b2 = o.beta2, eps = o.eps, lr = kLr;
  const double scale = norm > o.grad_clip ? o.grad_clip / (norm + 1e-6) : 1.0;
  std::vector<double> p(static_cast<size_t>(layout.total()), 0.0);
  for (int64_t i = range.begin; i < range.end; ++i) p[static_cast<size_t>(i)] = params[i];
  for (size_t k = 0; k < layout.size(); ++k) {
    const double wd = layout.spec(k).group == ParamGroup::matrix ? o.weight_decay : 0.0;
    const int64_t offset = layout.offset(k);
    const FlatRange r = flat_intersect(range, {offset, offset + layout.spec(k).shape.numel()});
    for (int64_t i = r.begin; i < r.end; ++i) {
      const double g = scale * grads[i], m = (1 - b1) * g, v = (1 - b2) * g * g;
      const double m_hat = m / (1 - b1), v_hat = v / (1 - b2);
      double& w = p[static_cast<size_t>(i)];
      w -= lr * wd * w;
      w -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  return p;
}

// Every stage on p ranks against the serial model: the reduced gradient of each rank's optimizer
// range and the global norm equal the serial ones (fp32 reduction order: within 1e-6 of the norm,
// and 1e-6 relative), and every updated parameter equals the AdamW step computed here from the
// initial parameters of the serial model and the gradient just checked (1e-4 of a step, lr, plus
// the float rounding of the parameter, 2⁻²² relative). The update is taken from the checked
// gradient rather than the serial one because an element whose gradient is as small as its
// reduction-order noise (~ε) has an update of undetermined size, ±lr.
TEST_P(ZeroStages, StepEqualsAPlainModelAndAdamWInDouble) {
  const int stage = GetParam();
  const Comm world = Comm::world();
  // Six layers make eight buckets, more than ZeroState's four gradient working buffers, so stages
  // 2/3 reuse freed buffers and recycle in-flight ones (optim/grad_pool.h [Note: gradient pool]).
  ModelConfig deep = test::gpt2_like();
  deep.n_layers = 6;
  for (const ModelConfig& cfg : {test::gpt2_like(), test::llama_like(), deep}) {
    const std::string name = (cfg.tie_embeddings ? "gpt2_like x" : "llama_like x") + std::to_string(cfg.n_layers);
    const Serial serial(cfg, world.size());
    const ParamLayout& layout = serial.model.layout();
    const float* g = serial.model.grads();
    double squares = 0;
    for (int64_t i = 0; i < layout.total(); ++i) squares += static_cast<double>(g[i]) * g[i];
    const double serial_norm = std::sqrt(squares);

    Replica dist(cfg, world, stage, 300, true);
    if (cfg.n_layers == 6) {
      ASSERT_GT(dist.zero.buckets().size(), 4u);
    }
    dist.accumulate(world.rank());
    const FlatRange mine = dist.zero.optimizer_range();
    std::vector<float> reduced(static_cast<size_t>(layout.total()), 0.0f);
    std::copy(dist.zero.optimizer_grads(), dist.zero.optimizer_grads() + mine.size(), reduced.begin() + mine.begin);
    for (int64_t i = mine.begin; i < mine.end; ++i)
      ASSERT_NEAR(reduced[static_cast<size_t>(i)], g[i], 1e-6 * serial_norm)
          << name << " gradient of flat element " << i;
    EXPECT_NEAR(dist.update(), serial_norm, 1e-6 * serial_norm) << name;

    // Each rank computes its optimizer range; the ranges of stages ≥ 1 tile the buffer.
    std::vector<double> want = adamw_first_step(layout, serial.model.params(), reduced.data(), serial_norm, mine);
    if (stage >= 1) world.all_reduce(want.data(), layout.total()).wait();
    const FlatRange held = dist.zero.held_params_range();
    const float* got = dist.zero.held_params();
    for (int64_t j = 0; j < held.size(); ++j) {
      const double w = want[static_cast<size_t>(held.begin + j)];
      ASSERT_NEAR(got[j], w, 1e-4 * kLr + std::ldexp(std::fabs(w), -22))
          << name << " parameter of flat element " << held.begin + j;
    }
  }
}

// [Note: 16-bit parameters] The 16-bit copy written by AdamW's own pass (what update() does) is
// bitwise the two passes it replaced — the float32 update, then every master rounded into the copy
// and gathered (params_written()) — over three steps at bf16 and fp16: the same masters, moments
// and 16-bit values of the rank's range (and so the same gathered copy, which the next step's
// forward and backward read).
TEST_P(ZeroStages, SixteenBitCopyWrittenInTheUpdateEqualsRoundingAfterIt) {
  const int stage = GetParam();
  const Comm world = Comm::world();
  const ModelConfig cfg = test::gpt2_like();
  for (const Precision p : {Precision::bf16, Precision::fp16}) {
    Replica fused(cfg, world, stage, 300, true, p), two_pass(cfg, world, stage, 300, true, p);
    const int64_t n = fused.zero.optimizer_range().size(), padded = fused.zero.optimizer_padded();
    for (int step = 1; step <= 3; ++step) {
      fused.step(world.rank());
      two_pass.accumulate(world.rank());
      two_pass.opt.step(two_pass.zero.optimizer_params(), two_pass.zero.optimizer_grads(), kLr,
                        grad_norm(Stream::cpu(), {two_pass.zero.grad_part()}));
      two_pass.zero.params_written();
      const std::string at = std::string(precision_name(p)) + " step " + std::to_string(step);
      const auto bytes = [](int64_t floats) { return static_cast<size_t>(floats) * sizeof(float); };
      ASSERT_EQ(std::memcmp(fused.zero.optimizer_params(), two_pass.zero.optimizer_params(), bytes(n)), 0) << at;
      ASSERT_EQ(std::memcmp(fused.opt.exp_avg(), two_pass.opt.exp_avg(), bytes(padded)), 0) << at;
      ASSERT_EQ(std::memcmp(fused.opt.exp_avg_sq(), two_pass.opt.exp_avg_sq(), bytes(padded)), 0) << at;
      const Tensor a = fused.zero.optimizer_params16(), b = two_pass.zero.optimizer_params16();
      ASSERT_EQ(a.numel(), n);
      for (int64_t e = 0; e < n; ++e)
        ASSERT_EQ(a.half()[e], b.half()[e]) << at << ": 16-bit copy of flat element "
                                            << fused.zero.optimizer_range().begin + e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stage, ZeroStages, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace megatrain
