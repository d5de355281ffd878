// kernels/cuda/moe_router.cu under the host SIMT emulation against the CPU: the route (scores,
// top-k with ties, gates) against router_forward and its backward against router_backward; the
// permutation plan against router_forward's capacity dropping and model/moe.cpp's row numbering;
// the permute / un-permute-combine and their backward against moe.cpp's loops (written out below
// as the reference); no tokens at all.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/moe_router.cu"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "model/moe_router.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::expect_matches_cpu;
using test::randn;

struct RouteCase {
  int64_t N;
  int E, k;
  bool sigmoid, bias;
};
void PrintTo(const RouteCase& c, std::ostream* os) {
  *os << "N=" << c.N << " E=" << c.E << " k=" << c.k << (c.sigmoid ? " sigmoid" : " softmax")
      << (c.bias ? " bias" : "");
}
class SimtMoeRouter : public ::testing::TestWithParam<RouteCase> {};

// Logits in steps of 0.5, so a row holds equal logits (equal scores: ties to the lower expert)
// and otherwise scores far apart; a bias in steps of 0.25 (0 for some experts).
std::vector<float> tied_logits(const RouteCase& c) {
  auto z = randn(static_cast<size_t>(c.N) * c.E, 1, 1.5f);
  for (auto& v : z) v = std::round(v * 2.0f) / 2.0f;
  return z;
}
std::vector<float> bias_of(const RouteCase& c) {
  if (!c.bias) return {};
  auto b = randn(static_cast<size_t>(c.E), 2, 0.3f);
  for (auto& v : b) v = std::round(v * 4.0f) / 4.0f;
  return b;
}
RouterSpec spec_of(const RouteCase& c, float capacity_factor, DropPolicy drop) {
  return RouterSpec{c.E, c.k, c.sigmoid ? RouterKind::sigmoid : RouterKind::softmax, capacity_factor, drop};
}

struct Routed {
  std::vector<float> scores, gates;
  std::vector<int32_t> expert, kept;
  std::vector<int64_t> tokens;
};
Routed cpu_route(const RouteCase& c, const RouterSpec& spec, const std::vector<float>& z, const std::vector<float>& b) {
  const size_t a = static_cast<size_t>(c.N) * c.k;
  Routed r{std::vector<float>(z.size()), std::vector<float>(a), std::vector<int32_t>(a), std::vector<int32_t>(a),
           std::vector<int64_t>(static_cast<size_t>(c.E))};
  router_forward(spec, c.N, z.data(), b.empty() ? nullptr : b.data(), r.scores.data(), r.expert.data(),
                 r.gates.data(), r.kept.data(), r.tokens.data());
  return r;
}
Routed gpu_route(const RouteCase& c, const std::vector<float>& z, const std::vector<float>& b) {
  const size_t a = static_cast<size_t>(c.N) * c.k;
  Routed r{std::vector<float>(z.size()), std::vector<float>(a), std::vector<int32_t>(a), std::vector<int32_t>(a, 7),
           std::vector<int64_t>(static_cast<size_t>(c.E), -1)};
  gpu::moe_route(nullptr, r.scores.data(), r.expert.data(), r.gates.data(), r.kept.data(), z.data(),
                 b.empty() ? nullptr : b.data(), c.N, c.E, c.k, c.sigmoid);
  return r;
}

// model/moe.cpp's numbering: kept assignments in a order, each after all earlier experts' rows.
std::vector<int32_t> cpu_rows(const std::vector<int32_t>& expert, const std::vector<int32_t>& kept,
                              const std::vector<int64_t>& tokens) {
  std::vector<int64_t> next(tokens.size());
  int64_t at = 0;
  for (size_t e = 0; e < tokens.size(); ++e) {
    next[e] = at;
    at += tokens[e];
  }
  std::vector<int32_t> row(expert.size());
  for (size_t a = 0; a < expert.size(); ++a) row[a] = kept[a] ? static_cast<int32_t>(next[expert[a]]++) : -1;
  return row;
}

void gpu_plan(const RouteCase& c, Routed& r, std::vector<int32_t>& row, int64_t capacity) {
  const int64_t n = c.N * c.k;
  row.assign(static_cast<size_t>(n), -2);
  std::vector<int32_t> scratch(gpu::moe_plan_scratch_ints(n, c.E));
  gpu::moe_permute_plan(nullptr, row.data(), r.kept.data(), r.gates.data(), r.tokens.data(), r.expert.data(), n, c.E,
                        capacity, scratch.data());
}

TEST_P(SimtMoeRouter, RouteMatchesCpu) {
  const RouteCase c = GetParam();
  const auto z = tied_logits(c), b = bias_of(c);
  const Routed want = cpu_route(c, spec_of(c, 0.0f, DropPolicy::probs), z, b);
  const Routed got = gpu_route(c, z, b);
  EXPECT_EQ(got.expert, want.expert) << "the choice, ties to the lower expert";
  EXPECT_EQ(got.kept, want.kept);
  expect_matches_cpu(got.scores, want.scores, "scores");
  expect_matches_cpu(got.gates, want.gates, "gates");
}

// Dropless and capacity dropping by position: the plan drops what router_forward drops and numbers
// the rows as moe.cpp does.
TEST_P(SimtMoeRouter, PlanMatchesCpuDroppingAndRows) {
  const RouteCase c = GetParam();
  const auto z = tied_logits(c), b = bias_of(c);
  for (float factor : {0.0f, 1.0f, 0.5f}) {
    SCOPED_TRACE(::testing::Message() << "capacity factor " << factor);
    const RouterSpec spec = spec_of(c, factor, DropPolicy::position);
    const Routed want = cpu_route(c, spec, z, b);
    Routed got = gpu_route(c, z, b);
    std::vector<int32_t> row;
    gpu_plan(c, got, row, expert_capacity(spec, c.N));
    EXPECT_EQ(got.expert, want.expert);
    EXPECT_EQ(got.kept, want.kept);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(row, cpu_rows(want.expert, want.kept, want.tokens));
    expect_matches_cpu(got.gates, want.gates, "gates after dropping");
  }
}

// Dropping by probability stays on the CPU; the plan numbers the rows of what it kept.
TEST_P(SimtMoeRouter, PlanOfCpuDroppedByProbs) {
  const RouteCase c = GetParam();
  const auto z = tied_logits(c), b = bias_of(c);
  const Routed want = cpu_route(c, spec_of(c, 0.5f, DropPolicy::probs), z, b);
  Routed got = want;
  std::vector<int32_t> row;
  gpu_plan(c, got, row, c.N);
  EXPECT_EQ(got.kept, want.kept) << "nothing more dropped";
  EXPECT_EQ(got.gates, want.gates);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(row, cpu_rows(want.expert, want.kept, want.tokens));
}

// The router's backward with capacity drops, with the aux and z losses each on and off.
TEST_P(SimtMoeRouter, RouterBackwardMatchesCpu) {
  const RouteCase c = GetParam();
  const auto z = tied_logits(c), b = bias_of(c);
  const RouterSpec spec = spec_of(c, 0.5f, DropPolicy::position);
  const Routed r = cpu_route(c, spec, z, b);
  const auto dgates = randn(static_cast<size_t>(c.N) * c.k, 8);
  std::vector<int32_t> scratch(gpu::moe_plan_scratch_ints(c.N * c.k, c.E));
  for (auto [aux, zl] : {std::pair{0.0f, 0.0f}, std::pair{0.7f, 0.0f}, std::pair{0.0f, 0.3f}, std::pair{0.7f, 0.3f}}) {
    SCOPED_TRACE(::testing::Message() << "aux_grad " << aux << " z_grad " << zl);
    std::vector<float> got(z.size(), NAN), want(z.size());
    gpu::moe_router_backward(nullptr, got.data(), z.data(), r.scores.data(), r.expert.data(), r.kept.data(),
                             dgates.data(), aux, zl, c.N, c.E, c.k, c.sigmoid, scratch.data());
    router_backward(spec, c.N, z.data(), r.scores.data(), r.expert.data(), r.kept.data(), dgates.data(), aux, zl,
                    want.data());
    expect_matches_cpu(got, want, "dlogits");
  }
}

// Permute, combine and their backward against moe.cpp's loops, with some assignments dropped.
TEST_P(SimtMoeRouter, PermuteAndCombineMatchCpuLoops) {
  const RouteCase c = GetParam();
  const int C = 37;
  const int64_t N = c.N, k = c.k, n = N * k;
  const auto z = tied_logits(c), b = bias_of(c);
  const Routed r = cpu_route(c, spec_of(c, 0.5f, DropPolicy::position), z, b);
  const auto row = cpu_rows(r.expert, r.kept, r.tokens);
  int64_t rows = 0;
  for (int64_t t : r.tokens) rows += t;
  const auto x = randn(static_cast<size_t>(N * C), 3), out = randn(static_cast<size_t>(rows * C), 4);
  const auto dy = randn(static_cast<size_t>(N * C), 5), dsend = randn(static_cast<size_t>(rows * C), 6);
  const auto dx0 = randn(static_cast<size_t>(N * C), 7);

  std::vector<float> send(static_cast<size_t>(rows * C), NAN), want_send(send.size());
  std::vector<float> y(static_cast<size_t>(N * C), NAN), want_y(y.size(), 0.0f);
  std::vector<float> dgates(static_cast<size_t>(n), NAN), want_dgates(dgates.size());
  std::vector<float> dout(send.size(), NAN), want_dout(send.size());
  std::vector<float> dx = dx0, want_dx = dx0;
  for (int64_t a = 0; a < n; ++a) {
    want_dgates[a] = 0.0f;
    if (row[a] < 0) continue;
    const int64_t t = a / k, rr = row[a];
    double dot = 0.0;
    for (int cc = 0; cc < C; ++cc) {
      want_send[rr * C + cc] = x[t * C + cc];
      want_y[t * C + cc] += r.gates[a] * out[rr * C + cc];
      dot += static_cast<double>(dy[t * C + cc]) * out[rr * C + cc];
      want_dout[rr * C + cc] = r.gates[a] * dy[t * C + cc];
      want_dx[t * C + cc] += dsend[rr * C + cc];
    }
    want_dgates[a] = static_cast<float>(dot);
  }
  gpu::moe_permute(nullptr, send.data(), x.data(), row.data(), n, c.k, C);
  gpu::moe_unpermute(nullptr, y.data(), out.data(), row.data(), r.gates.data(), N, c.k, C);
  gpu::moe_unpermute_backward(nullptr, dgates.data(), dout.data(), dy.data(), out.data(), row.data(), r.gates.data(),
                              N, c.k, C);
  gpu::moe_permute_backward(nullptr, dx.data(), dsend.data(), row.data(), N, c.k, C);
  EXPECT_EQ(send, want_send) << "every row copied once";
  expect_matches_cpu(y, want_y, "combine");
  expect_matches_cpu(dgates, want_dgates, "dgates");
  EXPECT_EQ(dout, want_dout) << "every row written once";
  expect_matches_cpu(dx, want_dx, "dx");
}

TEST(SimtMoeRouterEmpty, NoTokens) {
  gpu::moe_route(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 2, false);
  gpu::moe_router_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1.0f, 1.0f, 0, 4, 2, false,
                           nullptr);
  std::vector<int64_t> tokens(4, -1);
  std::vector<int32_t> scratch(gpu::moe_plan_scratch_ints(0, 4));
  gpu::moe_permute_plan(nullptr, nullptr, nullptr, nullptr, tokens.data(), nullptr, 0, 4, 0, scratch.data());
  EXPECT_EQ(tokens, std::vector<int64_t>(4, 0)) << "no rows for any expert";
  gpu::moe_permute(nullptr, nullptr, nullptr, nullptr, 0, 2, 8);
  gpu::moe_permute_backward(nullptr, nullptr, nullptr, nullptr, 0, 2, 8);
  gpu::moe_unpermute(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 2, 8);
  gpu::moe_unpermute_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 2, 8);
}

// Tokens: a partial block of 8 warps, and 150·2 = 300 assignments over two plan blocks. Experts:
// under a warp, one and a half warps (lanes owning two or one), two warps; k = 1 (no
// renormalisation), k = E (every expert).
INSTANTIATE_TEST_SUITE_P(Cases, SimtMoeRouter,
                         ::testing::Values(RouteCase{150, 8, 2, false, true}, RouteCase{37, 48, 3, true, false},
                                           RouteCase{20, 64, 1, false, false}, RouteCase{13, 5, 5, true, true},
                                           RouteCase{29, 6, 4, false, true}),
                         [](const auto& info) {
                           const RouteCase& c = info.param;
                           return fmt::format("N{}_E{}_k{}_{}{}", c.N, c.E, c.k, c.sigmoid ? "sigmoid" : "softmax",
                                              c.bias ? "_bias" : "");
                         });

}  // namespace
}  // namespace megatrain
