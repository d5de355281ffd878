// Block-wise causal attention against a naive full-softmax reference (in double), including
// sequence lengths that are not a multiple of the block size and grouped-query attention, and
// its backward against finite differences.
#include <cmath>

#include "kernels/ops.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {
using test::randn;

const Stream S = Stream::cpu();

std::vector<double> naive_attention(const std::vector<float>& qkv, int B, int T, int H, int Hkv, int D) {
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

TEST_P(AttentionTest, BackwardMatchesFiniteDifferences) {
  const auto [B, T, H, Hkv, D] = GetParam();
  const int row = (H + 2 * Hkv) * D;
  auto qkv = randn(static_cast<size_t>(B) * T * row, 41);
  auto r = randn(static_cast<size_t>(B) * T * H * D, 42);
  std::vector<float> out(r.size()), lse(static_cast<size_t>(B) * H * T), dqkv(qkv.size());
  auto fwd = [&] {
    attention_forward(S, Tensor(out.data(), {B, T, H * D}), Tensor(lse.data(), {B, H, T}),
                      Tensor(qkv.data(), {B, T, row}), H, Hkv);
    return test::dot(out, r);
  };
  fwd();
  attention_backward(S, Tensor(dqkv.data(), {B, T, row}), Tensor(r.data(), {B, T, H * D}),
                     Tensor(qkv.data(), {B, T, row}), Tensor(out.data(), {B, T, H * D}),
                     Tensor(lse.data(), {B, H, T}), H, Hkv);
  test::check_grad(qkv, dqkv, fwd, "dqkv", 1e-2f, 3e-3, 3e-2, 64);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Case{1, 5, 2, 2, 4}, Case{2, 70, 4, 2, 8}, Case{1, 130, 3, 1, 16},
                                           Case{1, 64, 2, 2, 8}));

}  // namespace
}  // namespace megatrain
