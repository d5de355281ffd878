// The MoE sublayer (model/moe.h) at ep = 1, tp = 1, dropout off, against a naive reference that
// loops over tokens in double precision:
//   y_t = x_t + Σ_j g_t,j · Expert_e_t,j(Norm(x)_t),   Expert_e(h) = Proj_e · Act(FC_e · h)
// once with the routing the layer stored (a.expert, a.gates, a.kept: the permutation, the exchange
// and the weighted un-permutation are checked whatever the router did), and for softmax routers
// again with the router recomputed from its definition (tests/model/moe_router_reference.h) on
// the reference's own logits. Cases: both architecture families (LayerNorm + GELU, RMSNorm +
// SwiGLU), softmax and sigmoid, k = 1 and 2, every token sent to one expert (a dominant router
// row), and capacity dropping under both policies, where a dropped assignment adds nothing (a
// token dropped entirely leaves the sublayer exactly as it came). Within 1e-5 of the row's size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "model/local_attention.h"
#include "model/moe.h"
#include "tests/model/moe_router_reference.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

using test::uniform;

constexpr int64_t kN = 24;  // tokens

struct Weights {
  std::vector<float> norm_w, norm_b, router, fc, proj;
};

// Seeded weights; with `hot` ≥ 0, router row `hot` is a multiple of `direction`, which every input
// row leans towards, so that expert wins every token — by a margin, not so far that its scores
// round to 1 in float (dropping by score would then break float ties the double reference has not).
Weights make_weights(const ModelConfig& cfg, int hot, const std::vector<float>& direction) {
  const int64_t C = cfg.d_model, E = cfg.moe.n_experts, F = cfg.expert_ffn_dim();
  const int64_t Fw = cfg.activation == ActivationKind::swiglu ? 2 * F : F;
  const bool bias = cfg.norm == NormKind::layernorm;
  Weights w{uniform(C, 0.5f, 1.5f, 11), bias ? uniform(C, -0.3f, 0.3f, 12) : std::vector<float>{},
            uniform(E * C, -0.5f, 0.5f, 13), uniform(E * Fw * C, -0.4f, 0.4f, 14), uniform(E * C * F, -0.4f, 0.4f, 15)};
  if (hot >= 0)
    for (int64_t c = 0; c < C; ++c) w.router[hot * C + c] = 0.6f * direction[c];
  return w;
}

// The layer's output and the routing it stored.
struct LayerRun {
  std::vector<float> y, gates;
  std::vector<int32_t> expert, kept;
};

LayerRun run_layer(const ModelConfig& cfg, Weights& w, std::vector<float> x) {
  const int64_t C = cfg.d_model, E = cfg.moe.n_experts, F = cfg.expert_ffn_dim();
  const int64_t Fw = cfg.activation == ActivationKind::swiglu ? 2 * F : F;
  const TensorParallel tp(kN, C);
  const auto plan = [&](Arena& arena, MoeActivations& a, MoeScratch& ms, BlockScratch& sc, Tensor& out) {
    a = moe_activations(arena, cfg, tp, 1, kN);
    ms = moe_scratch(arena, cfg, tp, 1, kN);
    sc.proj = sc.partial = arena.tensor(Shape{kN, C});
    out = arena.tensor(Shape{kN, C});
  };
  MoeActivations a;
  MoeScratch ms;
  BlockScratch sc;
  Tensor out;
  Arena measure = Arena::measuring();
  plan(measure, a, ms, sc, out);
  Arena arena(measure.used());
  plan(arena, a, ms, sc, out);
  const ExpertDispatch dispatch(std::nullopt, static_cast<int>(E), C);
  const LocalAttention whole(1, static_cast<int>(kN), AttnHeads{cfg.n_heads, cfg.kv_heads(), cfg.head_dim()});
  const MoeRuntime rt{router_spec(cfg.moe), &dispatch, 0.0f, 0.0f, 0.0f, &ms, nullptr, &whole};
  MoeWeights mw;
  mw.norm = {Tensor(w.norm_w.data(), Shape{C}), w.norm_b.empty() ? Tensor{} : Tensor(w.norm_b.data(), Shape{C})};
  mw.router = Tensor(w.router.data(), Shape{E, C});
  mw.fc = Tensor(w.fc.data(), Shape{E, Fw, C});
  mw.proj = Tensor(w.proj.data(), Shape{E, C, F});
  moe_sublayer_forward(Stream::cpu(), cfg, tp, rt, out, a, sc, Tensor(x.data(), Shape{kN, C}), mw, DropoutSite{});
  const int64_t k = cfg.moe.top_k;
  return {{out.f32(), out.f32() + kN * C},
          {a.gates.f32(), a.gates.f32() + kN * k},
          {a.expert.i32(), a.expert.i32() + kN * k},
          {a.kept.i32(), a.kept.i32() + kN * k}};
}

// Norm(x) per the architecture, in double.
std::vector<double> reference_norm(const ModelConfig& cfg, const Weights& w, const std::vector<float>& x) {
  const int64_t C = cfg.d_model;
  std::vector<double> h(static_cast<size_t>(kN * C));
  for (int64_t t = 0; t < kN; ++t) {
    const float* r = x.data() + t * C;
    double mean = 0.0, sq = 0.0;
    if (cfg.norm == NormKind::layernorm)
      for (int64_t c = 0; c < C; ++c) mean += r[c] / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) sq += (r[c] - mean) * (r[c] - mean) / static_cast<double>(C);
    const double rstd = 1.0 / std::sqrt(sq + cfg.norm_eps);
    for (int64_t c = 0; c < C; ++c)
      h[static_cast<size_t>(t * C + c)] = (r[c] - mean) * rstd * w.norm_w[c] + (w.norm_b.empty() ? 0.0 : w.norm_b[c]);
  }
  return h;
}

// Expert e on one normalised row, in double: Proj_e · Act(FC_e · h).
std::vector<double> reference_expert(const ModelConfig& cfg, const Weights& w, int e, const double* h) {
  const int64_t C = cfg.d_model, F = cfg.expert_ffn_dim();
  const bool swiglu = cfg.activation == ActivationKind::swiglu;
  const int64_t Fw = swiglu ? 2 * F : F;
  std::vector<double> fc(static_cast<size_t>(Fw)), act(static_cast<size_t>(F)), out(static_cast<size_t>(C), 0.0);
  for (int64_t f = 0; f < Fw; ++f)
    for (int64_t c = 0; c < C; ++c) fc[f] += static_cast<double>(w.fc[(e * Fw + f) * C + c]) * h[c];
  for (int64_t f = 0; f < F; ++f) {
    if (swiglu) {  // [gate | up]: silu(gate) · up
      const double g = fc[f];
      act[f] = g / (1.0 + std::exp(-g)) * fc[F + f];
    } else {  // GPT-2's tanh approximation
      const double v = fc[f];
      act[f] = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
  }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t f = 0; f < F; ++f) out[c] += static_cast<double>(w.proj[(e * C + c) * F + f]) * act[f];
  return out;
}

// y_t = x_t + Σ_j g_t,j · Expert_e_t,j(h_t) over the kept assignments.
std::vector<double> reference_output(const ModelConfig& cfg, const Weights& w, const std::vector<float>& x,
                                     const std::vector<double>& h, const std::vector<int32_t>& expert,
                                     const std::vector<double>& gates, const std::vector<int32_t>& kept) {
  const int64_t C = cfg.d_model, k = cfg.moe.top_k;
  std::vector<double> y(x.begin(), x.end());
  for (int64_t t = 0; t < kN; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const size_t a = static_cast<size_t>(t * k + j);
      if (!kept[a]) continue;
      const std::vector<double> o = reference_expert(cfg, w, expert[a], h.data() + t * C);
      for (int64_t c = 0; c < C; ++c) y[static_cast<size_t>(t * C + c)] += gates[a] * o[c];
    }
  return y;
}

void expect_output(const std::vector<float>& got, const std::vector<double>& want, int64_t C, const std::string& what) {
  for (int64_t t = 0; t < kN; ++t) {
    double scale = 0.0;
    for (int64_t c = 0; c < C; ++c) scale = std::max(scale, std::fabs(want[t * C + c]));
    for (int64_t c = 0; c < C; ++c)
      ASSERT_NEAR(got[t * C + c], want[t * C + c], 1e-5 * scale) << what << ": token " << t << " column " << c;
  }
}

struct Case {
  std::string name;
  ModelConfig cfg;
  bool one_expert = false;  // every token's first choice is expert 2
};

// ctest names a case by what this prints.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig moe(ModelConfig base, RouterKind router, int top_k, float capacity = 0.0f,
                DropPolicy drop = DropPolicy::probs) {
  ModelConfig c = test::moe_like(base, router, capacity);
  c.moe.top_k = top_k;
  c.moe.drop_policy = drop;
  return c;
}

class MoeLayer : public ::testing::TestWithParam<Case> {};

TEST_P(MoeLayer, MatchesTheNaiveReference) {
  const Case& p = GetParam();
  const ModelConfig& cfg = p.cfg;
  const int64_t C = cfg.d_model, k = cfg.moe.top_k;
  constexpr int kHot = 2;
  // Inputs: seeded noise, in the one-expert case around a large zero-mean direction.
  std::vector<float> dir = uniform(C, -1.0f, 1.0f, 20), x = uniform(kN * C, -1.0f, 1.0f, 21);
  float mean = 0.0f;
  for (float v : dir) mean += v / static_cast<float>(C);
  for (float& v : dir) v -= mean;
  if (p.one_expert)
    for (int64_t i = 0; i < kN * C; ++i) x[i] = 0.3f * x[i] + 3.0f * dir[i % C];
  Weights w = make_weights(cfg, p.one_expert ? kHot : -1, dir);
  const LayerRun got = run_layer(cfg, w, x);
  const std::vector<double> h = reference_norm(cfg, w, x);

  // With the routing the layer stored.
  int64_t dropped = 0;
  for (int64_t t = 0; t < kN; ++t) {
    bool any = false;
    for (int64_t j = 0; j < k; ++j) {
      any = any || got.kept[t * k + j];
      dropped += !got.kept[t * k + j];
    }
    if (p.one_expert) {
      ASSERT_EQ(got.expert[t * k], kHot) << "token " << t;
    }
    if (!any) {  // dropped entirely: exactly the residual
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(got.y[t * C + c], x[t * C + c]) << "token " << t;
    }
  }
  EXPECT_EQ(dropped > 0, cfg.moe.capacity_factor > 0.0f) << "the capacity cases must drop, the others not";
  expect_output(got.y, reference_output(cfg, w, x, h, got.expert, {got.gates.begin(), got.gates.end()}, got.kept), C,
                "stored routing");

  // With the router recomputed from scratch (softmax: the reference's definitions).
  if (cfg.moe.router != RouterKind::softmax) return;
  const int64_t E = cfg.moe.n_experts;
  std::vector<double> logits(static_cast<size_t>(kN * E), 0.0);
  for (int64_t t = 0; t < kN; ++t)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t c = 0; c < C; ++c) logits[t * E + e] += h[t * C + c] * w.router[e * C + c];
  const test::RouterReference r = test::router_reference(router_spec(cfg.moe), kN, logits);
  EXPECT_EQ(got.expert, r.expert);
  EXPECT_EQ(got.kept, r.kept);
  for (size_t a = 0; a < r.gates.size(); ++a) EXPECT_NEAR(got.gates[a], r.gates[a], 1e-5) << "assignment " << a;
  expect_output(got.y, reference_output(cfg, w, x, h, r.expert, r.gates, r.kept), C, "recomputed routing");
}

const ModelConfig kGpt2 = test::gpt2_like(), kLlama = test::llama_like();

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeLayer,
    ::testing::Values(Case{"gpt2_softmax_top2", moe(kGpt2, RouterKind::softmax, 2)},
                      Case{"gpt2_softmax_top1", moe(kGpt2, RouterKind::softmax, 1)},
                      Case{"llama_softmax_top2", moe(kLlama, RouterKind::softmax, 2)},
                      Case{"llama_sigmoid_top2", moe(kLlama, RouterKind::sigmoid, 2)},
                      Case{"gpt2_sigmoid_top1", moe(kGpt2, RouterKind::sigmoid, 1)},
                      Case{"gpt2_one_expert_top2", moe(kGpt2, RouterKind::softmax, 2), true},
                      Case{"llama_one_expert_top1", moe(kLlama, RouterKind::softmax, 1), true},
                      Case{"gpt2_one_expert_capacity_top1", moe(kGpt2, RouterKind::softmax, 1, 1.0f), true},
                      Case{"llama_one_expert_capacity_position_top2",
                           moe(kLlama, RouterKind::softmax, 2, 1.0f, DropPolicy::position), true},
                      Case{"gpt2_capacity_probs_top2", moe(kGpt2, RouterKind::softmax, 2, 0.5f)},
                      Case{"llama_sigmoid_capacity_position_top2",
                           moe(kLlama, RouterKind::sigmoid, 2, 0.5f, DropPolicy::position)}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace megatrain
