// ZeRO++ ([Note: ZeRO++] in optim/zero_plan.h) on 1, 2 and 4 ranks with a real tiny model:
//  - qwZ: what every rank computes with is, bitwise, the int8 block quantizer applied to the
//    owner's masters (blocks starting at each rank's part of the partition, or of the unit at
//    stage 3);
//  - qgZ: the reduced shard is, bitwise, the float32 sum in rank order of each rank's dequantized
//    contribution, and within Σ_k s_k/2 (plus float32 rounding) of the exact sum;
//  - hpZ: bitwise the results of plain stage 3 (and of qwZ alone, with qwZ);
//  - bytes moved per step and bytes held equal their formulas (parallel/comm.h counters).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/compress/block_quant.h"
#include "optim/zero_state.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

constexpr int kB = 2, kT = 8, kMicro = 2;
constexpr int64_t kBlock = 64;

struct Switches {
  bool qw = false, qg = false;
  int hpz = 1;
};

ZeroOptions options(int stage, Switches s) {
  ZeroOptions o{stage, 300, true};
  o.quantized_weights = s.qw;
  o.quantized_gradients = s.qg;
  o.hpz_partition_size = s.hpz;
  o.quant_block = kBlock;
  return o;
}

struct Replica {
  ParamLayout layout;
  ZeroState zero;
  Stage model;
  AdamW opt;
  Replica(const ModelConfig& cfg, const Comm& dp, int stage, Switches s)
      : layout(gpt_param_layout(cfg)), zero(gpt_param_units(layout, whole_model(cfg)), dp, options(stage, s)),
        model(cfg, kB, kT, layout, whole_model(cfg), StageOptions{}, zero, TensorParallel(int64_t{kB} * kT, cfg.d_model)),
        opt(model.layout(), AdamWOptions{}, zero.optimizer_range(), zero.optimizer_padded()) {
    init_params_range(model.layout(), zero.held_params(), zero.held_params_range(), cfg, 7);
    zero.params_written();
  }
  double step(int rank, int step) {
    zero.step_begin();
    for (int m = 0; m < kMicro; ++m) {
      zero.micro_batch_begin(m + 1 == kMicro);
      const auto s = static_cast<uint32_t>(1000 * step + rank * kMicro + m);
      const auto in = test::tokens(kB * kT, model.config().vocab_size, s);
      const auto tg = test::tokens(kB * kT, model.config().vocab_size, s + 500);
      ForwardOptions o;
      o.grad = LossGrad::in_place;
      o.dloss_scale = 1.0f;
      model.forward(0, MicroBatch{in.data(), tg.data(), o});
      model.backward(0);
      zero.micro_batch_end();
    }
    const double norm = grad_norm(Stream::cpu(), {zero.grad_part()});
    opt.step(zero.optimizer_params(), zero.optimizer_grads(), 1e-2f, norm);
    zero.step_end();
    return norm;
  }
};

// x̂ of n values quantized from `in` (blocks from in[0]).
std::vector<float> round_trip(const float* in, int64_t n) {
  std::vector<uint8_t> packed(static_cast<size_t>(quant_packed_bytes(n, kBlock)));
  quant_pack(packed.data(), in, n, kBlock);
  std::vector<float> out(static_cast<size_t>(n));
  quant_unpack(out.data(), packed.data(), n, kBlock);
  return out;
}

// Every rank's masters (optimizer_range at stages ≥ 1: the partitions tile [0, T)).
std::vector<float> all_masters(ZeroState& z, const Comm& world) {
  std::vector<int64_t> counts;
  for (int k = 0; k < world.size(); ++k) counts.push_back(flat_partition(z.total(), k, world.size()).size());
  std::vector<float> out(static_cast<size_t>(z.total()));
  world.all_gather(out.data(), z.held_params(), counts).wait();
  return out;
}

class Stages : public ::testing::TestWithParam<int> {};

TEST_P(Stages, QwzComputesWithTheQuantizedMastersOfTheOwner) {
  const int stage = GetParam();
  const Comm world = Comm::world();
  const int p = world.size();
  Replica r(test::gpt2_like(), world, stage, {.qw = true});
  r.step(world.rank(), 0);
  const std::vector<float> masters = all_masters(r.zero, world);
  const std::vector<FlatRange>& units = r.model.units();
  r.zero.begin_pass({});  // no prefetch: units are asked for one at a time
  for (size_t u = 0; u < units.size(); ++u) {
    // The parts quantized as one run: partitions at stages 1–2, a unit's parts at stage 3.
    std::vector<float> want(static_cast<size_t>(units[u].size()));
    for (int k = 0; k < p; ++k) {
      const FlatRange part = flat_partition(r.zero.total(), k, p);
      const FlatRange run = stage == 3 ? flat_intersect(units[u], part) : part;
      const std::vector<float> q = round_trip(masters.data() + run.begin, run.size());
      const FlatRange here = flat_intersect(units[u], run);
      for (int64_t i = here.begin; i < here.end; ++i)
        want[static_cast<size_t>(i - units[u].begin)] = q[static_cast<size_t>(i - run.begin)];
    }
    const float* got = r.zero.unit_params(static_cast<int>(u));
    for (int64_t i = 0; i < units[u].size(); ++i)
      ASSERT_EQ(got[i], want[static_cast<size_t>(i)]) << "stage " << stage << " unit " << u << " element " << i;
    r.zero.unit_params_done(static_cast<int>(u));
  }
}

// Seeded gradients of rank `rank`, unit by unit, so every rank can make every rank's.
std::vector<float> grads_of(int rank, int64_t total) {
  std::mt19937 rng(static_cast<uint32_t>(17 + rank));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(static_cast<size_t>(total));
  for (float& x : g) x = d(rng) * (1.0f + static_cast<float>(rank));
  return g;
}

TEST_P(Stages, QgzSumsTheDequantizedContributionsInRankOrder) {
  const int stage = GetParam();
  const Comm world = Comm::world();
  const int p = world.size();
  // Units of odd sizes, so parts and blocks have tails.
  const std::vector<FlatRange> units = {{0, 301}, {301, 650}, {650, 1001}, {1001, 1403}};
  ZeroState z(units, world, options(stage, {.qg = true}));
  const int64_t total = z.total();
  const std::vector<float> mine = grads_of(world.rank(), total);
  z.step_begin();
  z.micro_batch_begin(true);
  for (int u = static_cast<int>(units.size()) - 1; u >= 0; --u) {
    float* g = z.unit_grads(u);
    std::copy(mine.begin() + units[u].begin, mine.begin() + units[u].end, g);
    z.unit_grads_done(u);
  }
  z.micro_batch_end();
  const FlatRange part = z.partition();
  for (int b = 0; b < z.buckets().size(); ++b) {
    const FlatRange run = flat_intersect(z.buckets()[b].range, part);
    std::vector<float> want(static_cast<size_t>(run.size()), 0.0f), bound(want.size(), 0.0f);
    std::vector<double> exact(want.size(), 0.0);
    for (int k = 0; k < p; ++k) {
      const std::vector<float> gk = grads_of(k, total);
      const std::vector<float> q = round_trip(gk.data() + run.begin, run.size());
      for (int64_t i = 0; i < run.size(); ++i) {
        want[static_cast<size_t>(i)] += q[static_cast<size_t>(i)];
        exact[static_cast<size_t>(i)] += gk[static_cast<size_t>(run.begin + i)];
        float amax = 0.0f;  // the scale of the block holding i, from its values
        for (int64_t j = i / kBlock * kBlock; j < std::min(run.size(), (i / kBlock + 1) * kBlock); ++j)
          amax = std::max(amax, std::fabs(gk[static_cast<size_t>(run.begin + j)]));
        bound[static_cast<size_t>(i)] += amax / 127.0f / 2.0f;
      }
    }
    const float* got = z.optimizer_grads() + (run.begin - part.begin);
    for (int64_t i = 0; i < run.size(); ++i) {
      ASSERT_EQ(got[i], want[static_cast<size_t>(i)]) << "bucket " << b << " element " << run.begin + i;
      ASSERT_NEAR(got[i], exact[static_cast<size_t>(i)], bound[static_cast<size_t>(i)] * 1.001 + 1e-5)
          << "bucket " << b << " element " << run.begin + i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stage, Stages, ::testing::Values(1, 2, 3));

// hpZ only changes who sends the same float32 values: three steps give bitwise the norms and
// parameters of plain stage 3 (with qwZ on both sides, of qwZ alone).
TEST(Hpz, BitwiseEqualToPlainStageThree) {
  const Comm world = Comm::world();
  const int p = world.size();
  for (const bool qw : {false, true})
    for (int k = 2; k <= p; k *= 2) {
      Replica plain(test::gpt2_like(), world, 3, {.qw = qw}), hpz(test::gpt2_like(), world, 3, {.qw = qw, .hpz = k});
      for (int s = 0; s < 3; ++s) ASSERT_EQ(plain.step(world.rank(), s), hpz.step(world.rank(), s)) << "k " << k;
      const int64_t n = plain.zero.held_params_range().size();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(plain.zero.held_params()[i], hpz.zero.held_params()[i]) << "k " << k << " qwZ " << qw << " " << i;
    }
}

// The per-call byte formula of parallel/comm.h for a gather or reduce-scatter of S bytes over q ranks.
int64_t gathered(int64_t q, int64_t S) { return (q - 1) * S / q; }

// Bytes a rank moves in a step of M = kMicro micro-batches (gpt2_like: the tied embedding makes
// backward read every unit), T floats, units u, buckets b, rank r's part of a range x: x_r, packed
// size P(n) = quant_packed_bytes(n, block), norm = one double all-reduced:
//   qwZ stage 1:  reduce-scatter 4T + gather of the packed partitions ΣₖP(partₖ)        + norm
//   qgZ stage 2:  M · Σ_b Σ_{j≠r} P(b_j) (all-to-all) + gather 4T                     + norm
//   qwZ stage 3:  M · (2 · Σ_u gather(ΣₖP(u_k)) + reduce-scatter 4T)                  + norm
//   hpZ stage 3:  dp group: Σ_u gather(4u) once (the step's first forward) + M reduce-scatters + norm;
//                 hpZ group: (2M − 1) · Σ_u gather over k ranks of 4u
TEST(ZeroPP, BytesMovedPerStepEqualTheFormulas) {
  const Comm world = Comm::world();
  const int64_t p = world.size();
  const int r = world.rank();
  const ModelConfig cfg = test::gpt2_like();
  const int64_t norm = 2 * (p - 1) * 8 / p;
  const auto P = [](int64_t n) { return quant_packed_bytes(n, kBlock); };
  const auto packed_all = [&](FlatRange x, int64_t T) {
    int64_t s = 0;
    for (int k = 0; k < p; ++k) s += P(flat_intersect(x, flat_partition(T, k, static_cast<int>(p))).size());
    return s;
  };
  {
    Replica a(cfg, world, 1, {.qw = true});
    const int64_t T = a.zero.total();
    world.reset_stats();
    a.step(r, 0);
    EXPECT_EQ(world.stats().bytes_moved, gathered(p, 4 * T) + gathered(p, packed_all({0, T}, T)) + norm) << "qwZ 1";
  }
  {
    Replica a(cfg, world, 2, {.qg = true});
    const int64_t T = a.zero.total();
    int64_t a2a = 0;
    for (int b = 0; b < a.zero.buckets().size(); ++b)
      for (int j = 0; j < p; ++j)
        if (j != r) a2a += P(flat_intersect(a.zero.buckets()[b].range, flat_partition(T, j, static_cast<int>(p))).size());
    world.reset_stats();
    a.step(r, 0);
    EXPECT_EQ(world.stats().bytes_moved, kMicro * a2a + gathered(p, 4 * T) + norm) << "qgZ 2";
  }
  {
    Replica a(cfg, world, 3, {.qw = true});
    const int64_t T = a.zero.total();
    int64_t gathers = 0;
    for (const FlatRange& u : a.model.units()) gathers += gathered(p, packed_all(u, T));
    world.reset_stats();
    a.step(r, 0);
    EXPECT_EQ(world.stats().bytes_moved, kMicro * (2 * gathers + gathered(p, 4 * T)) + norm) << "qwZ 3";
  }
  if (p == 1) return;
  for (int64_t k = 2; k <= p; k *= 2) {
    Replica a(cfg, world, 3, {.hpz = static_cast<int>(k)});
    const int64_t T = a.zero.total();
    int64_t full = 0, group = 0;
    for (const FlatRange& u : a.model.units()) {
      full += gathered(p, 4 * u.size());
      group += gathered(k, 4 * u.size());
    }
    world.reset_stats();
    a.zero.hpz_comm().reset_stats();
    a.step(r, 0);
    EXPECT_EQ(world.stats().bytes_moved, full + kMicro * gathered(p, 4 * T) + norm) << "hpZ " << k;
    EXPECT_EQ(a.zero.hpz_comm().stats().bytes_moved, (2 * kMicro - 1) * group) << "hpZ " << k;
  }
}

// Bytes held: qwZ's stage-3 shard is the packed parts of the units; hpZ adds a 1/k slice of every
// unit to plain stage 3's parameters; the masters are the padded partition.
TEST(ZeroPP, MemoryCountsThePackedShardAndTheSecondaryShard) {
  const Comm world = Comm::world();
  const int p = world.size();
  const ModelConfig cfg = test::gpt2_like();
  Replica plain(cfg, world, 3, {}), qw(cfg, world, 3, {.qw = true});
  const int64_t T = plain.zero.total();
  int64_t packed = 0;
  for (const FlatRange& u : plain.model.units())
    packed += quant_packed_bytes(flat_intersect(u, plain.zero.partition()).size(), kBlock);
  EXPECT_EQ(qw.zero.memory().params, packed);
  EXPECT_EQ(qw.zero.memory().master_params, 4 * flat_shard_size(T, p));
  if (p == 1) return;
  Replica hpz(cfg, world, 3, {.hpz = 2});
  int64_t slice = 0;
  for (const FlatRange& u : plain.model.units()) slice += flat_partition(u.size(), world.rank() % 2, 2).size();
  EXPECT_EQ(hpz.zero.memory().params, plain.zero.memory().params + 4 * slice);
}

}  // namespace
}  // namespace megatrain
