// Block-wise causal attention against a naive full-softmax reference (in double), including
// sequence lengths that are not a multiple of the block size and grouped-query attention; its
// backward against central differences of that reference on every coordinate; attention over a
// KV cache (decoding) against the same reference.
#include <cmath>

#include "kernels/ops.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {
using test::randn;

const Stream S = Stream::cpu();

template <class F>
std::vector<double> naive_attention(const std::vector<F>& qkv, int B, int T, int H, int Hkv, int D) {
  const int row = (H + 2 * Hkv) * D;
  std::vector<double> out(static_cast<size_t>(B) * T * H * D, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int kvh = h / (H / Hkv);
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d)
            acc += static_cast<double>(qkv[(b * T + i) * row + h * D + d]) * qkv[(b * T + j) * row + (H + kvh) * D + d];
          s[j] = acc / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int j = 0; j <= i; ++j)
          for (int d = 0; d < D; ++d)
            out[((b * T + i) * H + h) * D + d] += s[j] / sum * qkv[(b * T + j) * row + (H + Hkv + kvh) * D + d];
      }
    }
  return out;
}

struct Case {
  int B, T, H, Hkv, D;
};

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, ForwardMatchesNaive) {
  const auto [B, T, H, Hkv, D] = GetParam();
  const int row = (H + 2 * Hkv) * D;
  auto qkv = randn(static_cast<size_t>(B) * T * row, 40);
  std::vector<float> out(static_cast<size_t>(B) * T * H * D), lse(static_cast<size_t>(B) * H * T);
  attention_forward(S, Tensor(out.data(), {B, T, H * D}), Tensor(lse.data(), {B, H, T}),
                    Tensor(qkv.data(), {B, T, row}), H, Hkv);
  test::expect_near_all(out, naive_attention(qkv, B, T, H, Hkv, D), 2e-5, 1e-4, "attention out");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Case{1, 5, 2, 2, 4}, Case{2, 70, 4, 2, 8}, Case{1, 130, 3, 1, 16},
                                           Case{1, 64, 2, 2, 8}));

// Every coordinate of dqkv against central differences of the double reference, on shapes small
// enough for that: one block, grouped-query, and a sequence longer than one block with a tail.
TEST(AttentionBackward, MatchesCentralDifferencesOnEveryCoordinate) {
  for (const Case c : {Case{1, 5, 2, 2, 4}, Case{2, 9, 4, 2, 4}, Case{1, 70, 2, 1, 4}}) {
    const auto [B, T, H, Hkv, D] = c;
    const int row = (H + 2 * Hkv) * D;
    auto qkv = randn(static_cast<size_t>(B) * T * row, 41);
    auto r = randn(static_cast<size_t>(B) * T * H * D, 42);
    std::vector<float> out(r.size()), lse(static_cast<size_t>(B) * H * T), dqkv(qkv.size());
    attention_forward(S, Tensor(out.data(), {B, T, H * D}), Tensor(lse.data(), {B, H, T}),
                      Tensor(qkv.data(), {B, T, row}), H, Hkv);
    attention_backward(S, Tensor(dqkv.data(), {B, T, row}), Tensor(r.data(), {B, T, H * D}),
                       Tensor(qkv.data(), {B, T, row}), Tensor(out.data(), {B, T, H * D}),
                       Tensor(lse.data(), {B, H, T}), H, Hkv);
    const auto loss = [&](const std::vector<double>& v) { return test::dot(naive_attention(v, B, T, H, Hkv, D), r); };
    test::expect_grad(dqkv, test::fd_grad(test::to_double(qkv), loss), "dqkv");
  }
}

// Rows [pos0, pos0 + n) of a sequence attend over a cache holding its keys and values; unfilled
// cache rows hold NaN and must not be read.
TEST(AttentionDecode, MatchesNaiveForEveryOffsetAndGroupedQuery) {
  for (const Case c : {Case{1, 9, 4, 2, 8}, Case{1, 70, 3, 1, 16}, Case{1, 6, 2, 2, 4}}) {
    const int T = c.T, H = c.H, Hkv = c.Hkv, D = c.D, row = (H + 2 * Hkv) * D, T_cache = T + 3;
    auto qkv = randn(static_cast<size_t>(T) * row, 43);
    const auto want = naive_attention(qkv, 1, T, H, Hkv, D);
    std::vector<float> k(static_cast<size_t>(T_cache) * Hkv * D, NAN), v(k.size(), NAN);
    for (int t = 0; t < T; ++t)
      for (int e = 0; e < Hkv * D; ++e) {
        k[static_cast<size_t>(t * Hkv * D + e)] = qkv[static_cast<size_t>(t * row + H * D + e)];
        v[static_cast<size_t>(t * Hkv * D + e)] = qkv[static_cast<size_t>(t * row + (H + Hkv) * D + e)];
      }
    for (const auto& [pos0, n] : {std::pair{0, T}, std::pair{0, 1}, std::pair{T - 1, 1}, std::pair{T / 2, T - T / 2}}) {
      std::vector<float> q(static_cast<size_t>(n) * H * D), out(q.size());
      for (int i = 0; i < n; ++i)
        for (int e = 0; e < H * D; ++e)
          q[static_cast<size_t>(i * H * D + e)] = qkv[static_cast<size_t>((pos0 + i) * row + e)];
      attention_decode_forward(S, Tensor(out.data(), {n, H * D}), Tensor(q.data(), {n, H * D}),
                               Tensor(k.data(), {T_cache, Hkv * D}), Tensor(v.data(), {T_cache, Hkv * D}), H, Hkv,
                               pos0);
      const std::vector<double> rows(want.begin() + static_cast<int64_t>(pos0) * H * D,
                                     want.begin() + static_cast<int64_t>(pos0 + n) * H * D);
      test::expect_near_all(out, rows, 2e-5, 1e-4, "decode out");
    }
  }
}

}  // namespace
}  // namespace megatrain
