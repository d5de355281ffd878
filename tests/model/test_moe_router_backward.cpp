// router_backward (model/moe_router.h) against central finite differences of the naive double
// reference (tests/model/moe_router_reference.h) on L = Σ dgates·gates + a·aux + b·z, for both
// routers, k = 1 and 2, dropless and with capacity drops under both policies. The logits are
// random and well separated, and every perturbed evaluation is checked to keep the same choices and
// drops, so the differences never cross a selection boundary.
#include <gtest/gtest.h>

#include "tests/model/moe_router_reference.h"

namespace megatrain {
namespace {

using test::router;
using test::uniform;

// Which terms of L a case turns on.
struct LossTerms {
  bool gates = false;
  float aux = 0.0f, z = 0.0f;
};

double reference_loss(const test::RouterReference& r, const std::vector<float>& dgates, const LossTerms& terms) {
  double l = terms.aux * r.aux + terms.z * r.z;
  if (terms.gates)
    for (size_t a = 0; a < r.gates.size(); ++a) l += static_cast<double>(dgates[a]) * r.gates[a];
  return l;
}

void expect_backward_matches_finite_differences(const RouterSpec& spec, const LossTerms& terms, uint32_t seed) {
  const int64_t N = 8;
  const int E = spec.n_experts, k = spec.top_k;
  // Skewed towards the higher experts: even choice counts would make the aux gradient vanish
  // (Σ_e c·p_t,e is constant when every c_e is equal), and capacity needs crowded experts.
  std::vector<float> logits = uniform(static_cast<size_t>(N * E), -2.5f, 2.5f, seed);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] += 0.5f * static_cast<float>(i % E);
  // Nonzero on dropped assignments too: backward must ignore them.
  const std::vector<float> dgates = terms.gates ? uniform(static_cast<size_t>(N * k), -1.0f, 1.0f, seed + 1000)
                                                : std::vector<float>(static_cast<size_t>(N * k), 0.0f);

  const test::Routed fwd = test::route(spec, N, logits);
  if (spec.capacity_factor > 0.0f) {
    ASSERT_GT(fwd.stats.dropped, 0) << "the case is meant to drop";
  }
  std::vector<float> dlogits(static_cast<size_t>(N * E), -1.0f);
  router_backward(spec, N, logits.data(), fwd.scores.data(), fwd.expert.data(), fwd.kept.data(), dgates.data(),
                  terms.aux, terms.z, dlogits.data());

  std::vector<double> x = test::to_double(logits);
  const test::RouterReference base = test::router_reference(spec, N, x);
  ASSERT_EQ(base.expert, fwd.expert);
  ASSERT_EQ(base.kept, fwd.kept);
  const double h = 1e-5;
  double largest = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const test::RouterReference plus = test::router_reference(spec, N, x);
    x[i] = xi - h;
    const test::RouterReference minus = test::router_reference(spec, N, x);
    x[i] = xi;
    for (const test::RouterReference* r : {&plus, &minus}) {
      ASSERT_EQ(r->expert, base.expert) << "logit " << i << ": the step crosses a choice boundary";
      ASSERT_EQ(r->kept, base.kept) << "logit " << i << ": the step crosses a drop boundary";
    }
    const double fd = (reference_loss(plus, dgates, terms) - reference_loss(minus, dgates, terms)) / (2 * h);
    largest = std::max(largest, std::abs(fd));
    EXPECT_NEAR(dlogits[i], fd, 1e-5 * (1.0 + std::abs(fd))) << "logit " << i << " (token " << i / E << ")";
  }
  EXPECT_GT(largest, 1e-3) << "the case must have a gradient to check";
}

// Each set of loss terms over both routers, k = 1 and 2, dropless and dropping by both policies
// (C = ceil(0.5 · 8 · k / 4) = k of 2k expected per expert).
void expect_backward_for_all_routers(const LossTerms& terms) {
  const char* const kCapacityNames[] = {" dropless", " drop=probs", " drop=position"};
  uint32_t seed = 1;
  for (RouterKind kind : {RouterKind::softmax, RouterKind::sigmoid})
    for (int k : {1, 2})
      for (int capacity : {0, 1, 2}) {
        const float cf = capacity == 0 ? 0.0f : 0.5f;
        const DropPolicy drop = capacity == 2 ? DropPolicy::position : DropPolicy::probs;
        SCOPED_TRACE(testing::Message() << (kind == RouterKind::softmax ? "softmax" : "sigmoid") << " k=" << k
                                        << kCapacityNames[capacity]);
        expect_backward_matches_finite_differences(router(kind, 4, k, cf, drop), terms, seed++);
      }
}

TEST(MoeRouterBackward, GatesOnlyMatchFiniteDifferences) { expect_backward_for_all_routers({true, 0.0f, 0.0f}); }

TEST(MoeRouterBackward, AuxOnlyMatchesFiniteDifferences) { expect_backward_for_all_routers({false, 0.7f, 0.0f}); }

TEST(MoeRouterBackward, ZOnlyMatchesFiniteDifferences) { expect_backward_for_all_routers({false, 0.0f, 0.3f}); }

TEST(MoeRouterBackward, AllTermsTogetherMatchFiniteDifferences) {
  expect_backward_for_all_routers({true, -1.3f, 0.45f});
}

TEST(MoeRouterBackward, DlogitsIsOverwrittenAndZeroWithNothingToDifferentiate) {
  const RouterSpec spec = router(RouterKind::softmax, 4, 2);
  const std::vector<float> logits = uniform(32, -1.0f, 1.0f, 5), dgates(16, 0.0f);
  const test::Routed fwd = test::route(spec, 8, logits);
  std::vector<float> dlogits(32, 123.0f);
  router_backward(spec, 8, logits.data(), fwd.scores.data(), fwd.expert.data(), fwd.kept.data(), dgates.data(), 0.0f,
                  0.0f, dlogits.data());
  for (float d : dlogits) EXPECT_EQ(d, 0.0f);
}

}  // namespace
}  // namespace megatrain
