// The MoE router's forward (model/moe_router.h) against the naive reference of
// tests/model/moe_router_reference.h and against hand-worked cases: choice, gates, scores, ties,
// the aux-free bias and its update (model/moe.h moe_update_bias), capacity drops under both
// policies, and the aux and z loss values.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>

#include "kernels/check.h"
#include "model/moe.h"
#include "tests/model/moe_router_reference.h"

namespace megatrain {
namespace {

using test::route;
using test::router;
using test::uniform;

// Every output of router_forward equals the reference's: choices, kept flags and counts exactly,
// scores and gates within float rounding, the losses within it relative to their size.
void expect_matches_reference(const RouterSpec& spec, int64_t N, const std::vector<float>& logits,
                              const std::vector<float>& bias = {}) {
  const test::Routed got = route(spec, N, logits, bias);
  const test::RouterReference want = test::router_reference(spec, N, test::to_double(logits), bias);
  for (size_t i = 0; i < want.scores.size(); ++i) ASSERT_NEAR(got.scores[i], want.scores[i], 1e-6) << "score " << i;
  for (size_t a = 0; a < want.expert.size(); ++a) {
    ASSERT_EQ(got.expert[a], want.expert[a]) << "assignment " << a;
    ASSERT_EQ(got.kept[a], want.kept[a]) << "assignment " << a;
    ASSERT_NEAR(got.gates[a], want.gates[a], 1e-6) << "assignment " << a;
  }
  EXPECT_EQ(got.tokens_per_expert, want.tokens_per_expert);
  EXPECT_EQ(got.stats.dropped, want.dropped);
  EXPECT_NEAR(got.stats.aux, want.aux, 1e-6 * std::max(1.0, want.aux));
  EXPECT_NEAR(got.stats.z, want.z, 1e-9 * std::max(1.0, want.z));
}

TEST(MoeRouter, RouterSpecCarriesTheMoeConfig) {
  MoeConfig moe;
  moe.n_experts = 8;
  moe.top_k = 3;
  moe.router = RouterKind::sigmoid;
  moe.capacity_factor = 1.25f;
  moe.drop_policy = DropPolicy::position;
  const RouterSpec s = router_spec(moe);
  EXPECT_EQ(s.n_experts, 8);
  EXPECT_EQ(s.top_k, 3);
  EXPECT_EQ(s.kind, RouterKind::sigmoid);
  EXPECT_EQ(s.capacity_factor, 1.25f);
  EXPECT_EQ(s.drop, DropPolicy::position);
}

TEST(MoeRouter, ExpertCapacityIsTheCeilingOfFactorTokensTopKOverExperts) {
  const RouterKind sm = RouterKind::softmax;
  EXPECT_EQ(expert_capacity(router(sm, 2, 1, 1.0f), 4), 2);
  EXPECT_EQ(expert_capacity(router(sm, 8, 2, 1.25f), 10), 4);  // 3.125
  EXPECT_EQ(expert_capacity(router(sm, 4, 1, 2.0f), 7), 4);    // 3.5
  EXPECT_EQ(expert_capacity(router(sm, 3, 2, 0.5f), 3), 1);    // exactly 1
  EXPECT_EQ(expert_capacity(router(sm, 4, 1, 0.1f), 3), 1);    // 0.075: at least one
  EXPECT_EQ(expert_capacity(router(sm, 4, 2, 1.0f), 0), 0);
  EXPECT_EQ(expert_capacity(router(sm, 11, 1, 1.1f), 10), 1) << "1.1f is above 1.1; the decimal's product is 1";
  EXPECT_EQ(expert_capacity(router(sm, 11, 1, 1.1f), 11), 2);  // 1.1
  EXPECT_EQ(expert_capacity(router(sm, 4, 2, 0.0f), 13), 13) << "dropless: every token fits";
  EXPECT_THROW(expert_capacity(router(sm, 4, 5, 1.0f), 8), Error) << "top_k > n_experts";
}

TEST(MoeRouter, SoftmaxAndSigmoidMatchTheReference) {
  uint32_t seed = 1;
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid})
    for (int E : {4, 8})
      for (int k : {1, 2, 3}) {
        SCOPED_TRACE(testing::Message() << (kind == RouterKind::softmax ? "softmax" : "sigmoid") << " E=" << E
                                        << " k=" << k);
        const int64_t N = 24;
        expect_matches_reference(router(kind, E, k), N, uniform(static_cast<size_t>(N * E), -4.0f, 4.0f, seed++));
        const test::Routed r = route(router(kind, E, k), N, uniform(static_cast<size_t>(N * E), -4, 4, seed++));
        EXPECT_EQ(r.stats.dropped, 0);
        for (int32_t kept : r.kept) EXPECT_EQ(kept, 1) << "dropless";
      }
}

TEST(MoeRouter, EqualScoresGoToTheLowerExpert) {
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid}) {
    // Row 0: all equal. Row 1: experts 1 and 2 tie for first, 0 and 3 for third.
    const std::vector<float> logits = {0.5f, 0.5f, 0.5f, 0.5f, 1.0f, 3.0f, 3.0f, 1.0f};
    const test::Routed r = route(router(kind, 4, 3), 2, logits);
    EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 2, 1, 2, 0}));
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(r.gates[static_cast<size_t>(j)], 1.0f / 3.0f, 1e-7);
    EXPECT_EQ(r.gates[3], r.gates[4]);
    expect_matches_reference(router(kind, 4, 3), 2, logits);
    EXPECT_EQ(route(router(kind, 4, 1), 2, logits).expert, (std::vector<int32_t>{0, 1}));
  }
}

// A huge logit in one column sends every token's first choice there; at k = 1 the other experts
// get none, and the aux loss reaches its maximum E (softmax: each P_e is then 0 or 1).
TEST(MoeRouter, AllTokensOnOneExpertLeaveTheOthersEmpty) {
  const int64_t N = 10;
  const int E = 4;
  std::vector<float> logits = uniform(static_cast<size_t>(N * E), -1.0f, 1.0f, 7);
  for (int64_t t = 0; t < N; ++t) logits[static_cast<size_t>(t * E + 2)] = 60.0f;
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid})
    for (int k : {1, 2}) {
      const test::Routed r = route(router(kind, E, k), N, logits);
      for (int64_t t = 0; t < N; ++t) EXPECT_EQ(r.expert[static_cast<size_t>(t * k)], 2);
      EXPECT_EQ(r.tokens_per_expert[2], N);
      if (k == 1) {
        EXPECT_EQ(r.tokens_per_expert, (std::vector<int64_t>{0, 0, N, 0}));
      }
      if (k == 1 && kind == RouterKind::softmax) {
        EXPECT_NEAR(r.stats.aux, E, 1e-9);
      }
      expect_matches_reference(router(kind, E, k), N, logits);
    }
}

// The DeepSeek-V3 bias moves an expert into the top k, but the gates stay the unbiased scores of
// the chosen experts, normalised; the scores themselves do not see the bias.
TEST(MoeRouter, AuxFreeBiasChangesTheChoiceNotTheGates) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 5.0f, 0.0f};
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid}) {
    const test::Routed plain = route(router(kind, 4, 2), 1, logits);
    const test::Routed biased = route(router(kind, 4, 2), 1, logits, bias);
    EXPECT_EQ(plain.expert, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(biased.expert, (std::vector<int32_t>{2, 0}));
    EXPECT_EQ(biased.scores, plain.scores);
    const double s0 = plain.scores[0], s2 = plain.scores[2];
    EXPECT_NEAR(biased.gates[0], s2 / (s2 + s0), 1e-7);
    EXPECT_NEAR(biased.gates[1], s0 / (s2 + s0), 1e-7);
    EXPECT_NEAR(route(router(kind, 4, 1), 1, logits, bias).gates[0], s2, 1e-7) << "k = 1: the raw score";
    expect_matches_reference(router(kind, 4, 2), 1, logits, bias);
    const std::vector<float> many = uniform(64, -2.0f, 2.0f, 11), many_bias = uniform(8, -0.3f, 0.3f, 12);
    expect_matches_reference(router(kind, 8, 2), 8, many, many_bias);
  }
}

// moe_update_bias (model/moe.h) against its definition, b_e += rate · sign(mean load − load_e): an
// overloaded expert's bias goes down by the rate, an underloaded one's up, one at the mean stays,
// added to the bias there (not set); the mean need not be an integer.
TEST(MoeRouter, AuxFreeBiasUpdateMovesEachExpertByTheRateTowardsTheMeanLoad) {
  const float rate = 0.01f;
  std::vector<float> bias = {0.5f, -0.25f, 0.125f, 0.0f};
  const std::vector<int64_t> load = {10, 2, 6, 6};  // mean 6
  moe_update_bias(bias.data(), load.data(), 4, rate);
  EXPECT_EQ(bias, (std::vector<float>{0.5f - rate, -0.25f + rate, 0.125f, 0.0f}));
  std::vector<float> b = {0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<int64_t> one_busy = {3, 0, 0, 0};  // mean 0.75
  moe_update_bias(b.data(), one_busy.data(), 4, rate);
  EXPECT_EQ(b, (std::vector<float>{-rate, rate, rate, rate}));
}

// The update as the router reads it: every token prefers expert 0 (k = 1); a few updates at a rate
// of the scores' spread move tokens from it to the others, so the loads come closer together.
TEST(MoeRouter, AuxFreeBiasUpdatesBalanceTheRouting) {
  constexpr int E = 4;
  constexpr int64_t N = 32;
  std::vector<float> logits = uniform(static_cast<size_t>(N * E), -0.5f, 0.5f, 21);
  for (int64_t t = 0; t < N; ++t) logits[static_cast<size_t>(t * E)] += 1.0f;
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid}) {
    std::vector<float> bias(E, 0.0f);
    const std::vector<int64_t> before = route(router(kind, E, 1), N, logits, bias).tokens_per_expert;
    ASSERT_EQ(before[0], N);
    for (int update = 0; update < 4; ++update) {
      const std::vector<int64_t> load = route(router(kind, E, 1), N, logits, bias).tokens_per_expert;
      moe_update_bias(bias.data(), load.data(), E, 0.1f);
    }
    const std::vector<int64_t> after = route(router(kind, E, 1), N, logits, bias).tokens_per_expert;
    const auto [lo, hi] = std::minmax_element(after.begin(), after.end());
    EXPECT_LT(*hi - *lo, N) << "the loads are no closer: " << ::testing::PrintToString(after);
  }
}

// k = 1, E = 2, 4 tokens all on expert 0, C = ceil(1 · 4 · 1 / 2) = 2. Scores of expert 0 by token:
// low, highest, and two equal ones (identical rows).
const std::vector<float> kOneExpertLogits = {1.0f, 0.0f, 4.0f, 0.0f, 3.0f, 0.0f, 3.0f, 0.0f};

TEST(MoeRouter, CapacityByProbsKeepsTheHighestScoresTiesToTheLowerToken) {
  const RouterSpec spec = router(RouterKind::softmax, 2, 1, 1.0f, DropPolicy::probs);
  ASSERT_EQ(expert_capacity(spec, 4), 2);
  const test::Routed r = route(spec, 4, kOneExpertLogits);
  EXPECT_EQ(r.kept, (std::vector<int32_t>{0, 1, 1, 0}));  // token 1 (highest), token 2 (wins the tie)
  EXPECT_EQ(r.gates[0], 0.0f);
  EXPECT_EQ(r.gates[3], 0.0f);
  EXPECT_EQ(r.gates[1], r.scores[2]);
  EXPECT_EQ(r.gates[2], r.scores[4]);
  EXPECT_EQ(r.tokens_per_expert, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(r.stats.dropped, 2);
  expect_matches_reference(spec, 4, kOneExpertLogits);
}

TEST(MoeRouter, CapacityByPositionKeepsTheFirstTokens) {
  const RouterSpec spec = router(RouterKind::softmax, 2, 1, 1.0f, DropPolicy::position);
  const test::Routed r = route(spec, 4, kOneExpertLogits);
  EXPECT_EQ(r.kept, (std::vector<int32_t>{1, 1, 0, 0}));
  EXPECT_EQ(r.gates[0], r.scores[0]);
  EXPECT_EQ(r.gates[2], 0.0f);
  EXPECT_EQ(r.gates[3], 0.0f);
  EXPECT_EQ(r.tokens_per_expert, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(r.stats.dropped, 2);
  expect_matches_reference(spec, 4, kOneExpertLogits);
}

// Sigmoid (a score depends on its own logit only, so equal logits tie exactly), k = 2, E = 3,
// 3 tokens, C = ceil(0.5 · 3 · 2 / 3) = 1. Choices: token 0 → (0, 1), token 1 → (1, 0), token 2 →
// (1, 2). Expert 1 is chosen by tokens 0 (σ(1)), 1 and 2 (σ(2) each: a tie).
TEST(MoeRouter, CapacityAtTopTwoDropsWithoutRenormalising) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, 1.0f, 2.0f, 0.0f, 0.0f, 2.0f, 1.0f};
  const float hi = 1.0f / (1.0f + std::exp(-2.0f)), lo = 1.0f / (1.0f + std::exp(-1.0f));
  const float g_hi = hi / (hi + lo), g_lo = lo / (hi + lo);
  const auto spec = [](DropPolicy d) { return router(RouterKind::sigmoid, 3, 2, 0.5f, d); };
  ASSERT_EQ(expert_capacity(spec(DropPolicy::probs), 3), 1);

  const test::Routed probs = route(spec(DropPolicy::probs), 3, logits);
  EXPECT_EQ(probs.expert, (std::vector<int32_t>{0, 1, 1, 0, 1, 2}));
  EXPECT_EQ(probs.kept, (std::vector<int32_t>{1, 0, 1, 0, 0, 1}));
  const std::vector<float> probs_gates = {g_hi, 0.0f, g_hi, 0.0f, 0.0f, g_lo};
  for (size_t a = 0; a < 6; ++a) EXPECT_NEAR(probs.gates[a], probs_gates[a], 1e-6) << "assignment " << a;

  const test::Routed position = route(spec(DropPolicy::position), 3, logits);
  EXPECT_EQ(position.kept, (std::vector<int32_t>{1, 1, 0, 0, 0, 1}));
  const std::vector<float> position_gates = {g_hi, g_lo, 0.0f, 0.0f, 0.0f, g_lo};
  for (size_t a = 0; a < 6; ++a) EXPECT_NEAR(position.gates[a], position_gates[a], 1e-6) << "assignment " << a;

  for (const test::Routed* r : {&probs, &position}) {
    EXPECT_EQ(r->tokens_per_expert, (std::vector<int64_t>{1, 1, 1}));
    EXPECT_EQ(r->stats.dropped, 3);
  }
  expect_matches_reference(spec(DropPolicy::probs), 3, logits);
  expect_matches_reference(spec(DropPolicy::position), 3, logits);
}

TEST(MoeRouter, CapacityMatchesTheReferenceOnRandomLogits) {
  uint32_t seed = 100;
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid})
    for (DropPolicy drop : {DropPolicy::probs, DropPolicy::position})
      for (int k : {1, 2, 3})
        for (float cf : {0.5f, 1.0f, 2.0f}) {
          SCOPED_TRACE(testing::Message() << "kind " << static_cast<int>(kind) << " drop " << static_cast<int>(drop)
                                          << " k=" << k << " cf=" << cf);
          const int64_t N = 32;
          const int E = 8;
          // Skewed logits (a per-expert offset) so that some experts overflow even at cf = 1.
          std::vector<float> logits = uniform(static_cast<size_t>(N * E), -2.0f, 2.0f, seed++);
          for (size_t i = 0; i < logits.size(); ++i) logits[i] += 0.4f * static_cast<float>(i % E);
          expect_matches_reference(router(kind, E, k, cf, drop), N, logits);
          if (cf < 2.0f) {
            EXPECT_GT(route(router(kind, E, k, cf, drop), N, logits).stats.dropped, 0);
          }
        }
}

TEST(MoeRouter, AuxAndZLossesEqualTheirFormulas) {
  // Perfect balance at k = 1: token t sure of expert t. aux = E / N · Σ_e 1 · 1/E = 1 at N = E;
  // z = (lse)² with lse = 30 + log(1 + 3e^-30).
  std::vector<float> logits(16, 0.0f);
  for (int t = 0; t < 4; ++t) logits[static_cast<size_t>(t * 4 + t)] = 30.0f;
  const test::Routed balanced = route(router(RouterKind::softmax, 4, 1), 4, logits);
  EXPECT_NEAR(balanced.stats.aux, 1.0, 1e-9);
  const double lse = 30.0 + std::log1p(3.0 * std::exp(-30.0));
  EXPECT_NEAR(balanced.stats.z, lse * lse, 1e-9);

  uint32_t seed = 200;
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid})
    for (int k : {1, 2})
      for (float cf : {0.0f, 0.5f}) {
        const std::vector<float> x = uniform(96, -3.0f, 3.0f, seed++);
        const test::Routed r = route(router(kind, 6, k, cf), 16, x);
        const test::RouterReference want = test::router_reference(router(kind, 6, k, cf), 16, test::to_double(x));
        EXPECT_NEAR(r.stats.aux, want.aux, 1e-6 * want.aux) << "aux counts choices before dropping";
        EXPECT_NEAR(r.stats.z, want.z, 1e-9 * want.z);
      }

  const test::Routed none = route(router(RouterKind::softmax, 4, 2, 1.0f), 0, {});
  EXPECT_EQ(none.stats.aux, 0.0);
  EXPECT_EQ(none.stats.z, 0.0);
  EXPECT_EQ(none.tokens_per_expert, (std::vector<int64_t>{0, 0, 0, 0}));
}

// Logits far beyond exp's range give exact 0 and 1 scores, never NaN; a sigmoid row whose chosen
// scores underflow to 0 in float gets gates 0 and no aux share (header: instead of 0/0).
TEST(MoeRouter, ExtremeLogitsStayFinite) {
  const std::vector<float> logits = {1000.0f, -1000.0f, 0.0f, 88.0f, -200.0f, -200.0f, -200.0f, -200.0f};
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid}) {
    const RouterSpec spec = router(kind, 4, 2);
    const test::Routed r = route(spec, 2, logits);
    for (float s : r.scores) EXPECT_TRUE(std::isfinite(s));
    for (float g : r.gates) EXPECT_TRUE(std::isfinite(g));
    EXPECT_TRUE(std::isfinite(r.stats.aux));
    EXPECT_NEAR(r.stats.z, (1000.0 * 1000.0 + std::pow(-200.0 + std::log(4.0), 2)) / 2, 1e-6);
    EXPECT_EQ(r.expert[0], 0);
    EXPECT_EQ(r.scores[0], 1.0f);
    EXPECT_EQ(r.scores[1], 0.0f);
    std::vector<float> dlogits(8), dgates = {0.5f, -0.25f, 1.0f, 2.0f};
    router_backward(spec, 2, logits.data(), r.scores.data(), r.expert.data(), r.kept.data(), dgates.data(), 1.0f, 1.0f,
                    dlogits.data());
    for (float d : dlogits) EXPECT_TRUE(std::isfinite(d));
    if (kind == RouterKind::sigmoid) {
      EXPECT_EQ(r.scores[4], 0.0f) << "σ(-200) underflows in float";
      EXPECT_EQ(r.gates[2], 0.0f);
      EXPECT_EQ(r.gates[3], 0.0f);
    }
  }
}

// Per-token work may run on any number of threads; the result must not depend on it.
TEST(MoeRouter, ResultsDoNotDependOnTheThreadCount) {
  const std::vector<float> x = uniform(64 * 8, -3.0f, 3.0f, 300);
  const RouterSpec spec = router(RouterKind::sigmoid, 8, 2, 1.0f);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const test::Routed one = route(spec, 64, x);
  omp_set_num_threads(3);
  const test::Routed three = route(spec, 64, x);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.scores, three.scores);
  EXPECT_EQ(one.gates, three.gates);
  EXPECT_EQ(one.kept, three.kept);
  EXPECT_EQ(one.stats.aux, three.stats.aux);
  EXPECT_EQ(one.stats.z, three.stats.z);
}

}  // namespace
}  // namespace megatrain
