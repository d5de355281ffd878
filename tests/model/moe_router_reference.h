// A naive reference for the MoE router tests, written from the definitions in model/moe_router.h and
// nothing else: double precision throughout, a full sort for the top-k and for each expert's
// capacity, every loss summed straight from its formula. Also the router_forward call the tests
// compare with it, and seeded test data.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "model/moe_router.h"

namespace megatrain::test {

struct RouterReference {
  std::vector<double> scores, gates;  // (N, E), (N, k)
  std::vector<int32_t> expert, kept;  // (N, k)
  std::vector<int64_t> tokens_per_expert;
  int64_t dropped = 0;
  double aux = 0.0, z = 0.0;
};

inline RouterReference router_reference(const RouterSpec& spec, int64_t N, const std::vector<double>& logits,
                                        const std::vector<float>& bias = {}) {
  const int E = spec.n_experts, k = spec.top_k;
  RouterReference r;
  r.scores.assign(static_cast<size_t>(N * E), 0.0);
  r.gates.assign(static_cast<size_t>(N * k), 0.0);
  r.expert.assign(static_cast<size_t>(N * k), -1);
  r.kept.assign(static_cast<size_t>(N * k), 1);
  r.tokens_per_expert.assign(static_cast<size_t>(E), 0);
  const auto s = [&](int64_t t, int e) { return r.scores[static_cast<size_t>(t * E + e)]; };

  double z_sum = 0.0;
  for (int64_t t = 0; t < N; ++t) {
    const double* x = &logits[static_cast<size_t>(t * E)];
    const double m = *std::max_element(x, x + E);
    double sum = 0.0;
    for (int e = 0; e < E; ++e) sum += std::exp(x[e] - m);
    const double lse = m + std::log(sum);
    z_sum += lse * lse;
    for (int e = 0; e < E; ++e)
      r.scores[static_cast<size_t>(t * E + e)] =
          spec.kind == RouterKind::softmax ? std::exp(x[e] - m) / sum : 1.0 / (1.0 + std::exp(-x[e]));

    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    const auto key = [&](int e) { return s(t, e) + (bias.empty() ? 0.0 : static_cast<double>(bias[e])); };
    std::sort(order.begin(), order.end(), [&](int a, int b) { return key(a) != key(b) ? key(a) > key(b) : a < b; });
    double chosen = 0.0;
    for (int j = 0; j < k; ++j) chosen += s(t, order[j]);
    for (int j = 0; j < k; ++j) {
      r.expert[static_cast<size_t>(t * k + j)] = order[j];
      r.gates[static_cast<size_t>(t * k + j)] = k == 1 ? s(t, order[j]) : s(t, order[j]) / chosen;
    }
  }

  if (spec.capacity_factor > 0.0f) {
    // Exact for the factors these tests use (0.5, 1, 2: no float rounding in them).
    const auto C = static_cast<size_t>(std::ceil(static_cast<double>(spec.capacity_factor) * N * k / E));
    for (int e = 0; e < E; ++e) {
      std::vector<int64_t> chose;  // assignments t·k + j choosing e, in token order
      for (int64_t a = 0; a < N * k; ++a)
        if (r.expert[static_cast<size_t>(a)] == e) chose.push_back(a);
      if (spec.drop == DropPolicy::probs)
        std::sort(chose.begin(), chose.end(), [&](int64_t a, int64_t b) {
          const double sa = s(a / k, e), sb = s(b / k, e);
          return sa != sb ? sa > sb : a < b;
        });
      for (size_t i = C; i < chose.size(); ++i) {
        r.kept[static_cast<size_t>(chose[i])] = 0;
        r.gates[static_cast<size_t>(chose[i])] = 0.0;
      }
    }
  }

  std::vector<double> c(static_cast<size_t>(E), 0.0), P(static_cast<size_t>(E), 0.0);
  for (int64_t a = 0; a < N * k; ++a) {
    c[static_cast<size_t>(r.expert[static_cast<size_t>(a)])] += 1.0;
    if (r.kept[static_cast<size_t>(a)])
      ++r.tokens_per_expert[static_cast<size_t>(r.expert[static_cast<size_t>(a)])];
    else
      ++r.dropped;
  }
  for (int64_t t = 0; t < N; ++t) {
    double row = 0.0;
    for (int e = 0; e < E; ++e) row += s(t, e);
    for (int e = 0; e < E; ++e) P[e] += (spec.kind == RouterKind::softmax ? s(t, e) : s(t, e) / row) / N;
  }
  if (N > 0) {
    for (int e = 0; e < E; ++e) r.aux += static_cast<double>(E) / (N * k) * c[e] * P[e];
    r.z = z_sum / N;
  }
  return r;
}

// router_forward's outputs.
struct Routed {
  std::vector<float> scores, gates;
  std::vector<int32_t> expert, kept;
  std::vector<int64_t> tokens_per_expert;
  RouterStats stats;
};

inline Routed route(const RouterSpec& spec, int64_t N, const std::vector<float>& logits,
                    const std::vector<float>& bias = {}) {
  const int E = spec.n_experts, k = spec.top_k;
  Routed r;
  r.scores.assign(static_cast<size_t>(N * E), -1.0f);
  r.gates.assign(static_cast<size_t>(N * k), -1.0f);
  r.expert.assign(static_cast<size_t>(N * k), -1);
  r.kept.assign(static_cast<size_t>(N * k), -1);
  r.tokens_per_expert.assign(static_cast<size_t>(E), -1);
  r.stats = router_forward(spec, N, logits.data(), bias.empty() ? nullptr : bias.data(), r.scores.data(),
                           r.expert.data(), r.gates.data(), r.kept.data(), r.tokens_per_expert.data());
  return r;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// n floats uniform in [lo, hi) from a fixed seed; the conversion is written out so that every
// standard library gives the same values.
inline std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(rng() >> 8) * 0x1p-24f;
  return v;
}

inline RouterSpec router(RouterKind kind, int n_experts, int top_k, float capacity_factor = 0.0f,
                         DropPolicy drop = DropPolicy::probs) {
  return RouterSpec{n_experts, top_k, kind, capacity_factor, drop};
}

}  // namespace megatrain::test
