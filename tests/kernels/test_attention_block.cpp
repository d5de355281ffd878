// Context parallelism's attention, piece by piece on one process: the sequence cut into 2·cp chunks
// (parallel/context_parallel.h), each chunk's queries attending to each earlier-or-equal chunk's
// keys through attention_block_forward (the causal mask on the diagonal pair, none below it), the
// pieces merged by their log-sum-exp (attention_merge) — against the whole sequence's attention
// for every chunk; the backward pieces summed against the whole sequence's gradients. Chunk lengths
// 5 and 70 put the chunk borders inside and across the kernels' 64-row blocks; the key chunks are
// merged oldest first and newest first, and with scores of several hundred (q, k, v × 12). The
// merge against float64 with log-sum-exps near 200 (e^200 overflows a float), and the row copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "parallel/context_parallel.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {
using test::randn;

const Stream S = Stream::cpu();

struct Case {
  int B, chunks, c, H, Hkv, D;  // `chunks` of c rows each
  float scale = 1.0f;           // of q, k and v: 12 makes scores of several hundred (the max shift's case)
  bool reverse = false;         // merge the key chunks newest first (a ring receives them in either order)
};

class AttentionBlocks : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionBlocks, ChunkPairsMergedAreTheWholeSequence) {
  const int B = GetParam().B, n = GetParam().chunks, c = GetParam().c, H = GetParam().H, Hkv = GetParam().Hkv,
            D = GetParam().D;
  const int T = n * c, row = (H + 2 * Hkv) * D, qw = H * D, kvw = Hkv * D;
  const float scale = GetParam().scale;
  const bool reverse = GetParam().reverse;
  auto qkv_v = randn(static_cast<size_t>(B) * T * row, 50, scale);
  std::vector<float> want(static_cast<size_t>(B) * T * qw), want_lse(static_cast<size_t>(B) * H * T);
  const Tensor qkv(qkv_v.data(), {B, T, row});
  attention_forward(S, Tensor(want.data(), {B, T, qw}), Tensor(want_lse.data(), {B, H, T}), qkv, H, Hkv);

  std::vector<float> out(want.size()), lse(want_lse.size()), part(want.size()), part_lse(want_lse.size());
  const Tensor o(out.data(), {B, T, qw}), l(lse.data(), {B, H, T}), p(part.data(), {B, T, qw}),
      pl(part_lse.data(), {B, H, T});
  const AttnHeads heads{H, Hkv, D};
  for (int a = 0; a < n; ++a)  // chunk a's queries over chunks 0 … a (or a … 0)
    for (int i = 0; i <= a; ++i) {
      const int b = reverse ? a - i : i;
      const AttnRows q{qkv, 0, a * c, c}, k{qkv, qw, b * c, c}, v{qkv, qw + kvw, b * c, c};
      if (i == 0) {
        attention_block_forward(S, {o, 0, a * c, c}, l, q, k, v, heads, a == b);
      } else {
        attention_block_forward(S, {p, 0, a * c, c}, pl, q, k, v, heads, a == b);
        attention_merge(S, {o, 0, a * c, c}, l, {p, 0, a * c, c}, pl, heads);
      }
    }
  // Outputs are convex combinations of v. At scores of several hundred (scale 12) the whole
  // sequence's and the blocks' float32 scores round differently (≈ 1e-7 of |q|·|k| each), which
  // moves an output by up to ~1e-5 of the largest (measured 4.2e-4 of 40); the bound, 5e-5 · scale
  // of it, still sees a lost max shift (inf) and a block in the wrong place (the values themselves).
  float largest_out = 0.0f;
  for (float x : want) largest_out = std::max(largest_out, std::fabs(x));
  const float out_tol = scale == 1.0f ? 2e-6f : 5e-5f * scale * largest_out;
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], out_tol) << "out element " << i;
  for (size_t i = 0; i < lse.size(); ++i)
    ASSERT_NEAR(lse[i], want_lse[i], 2e-6 * std::max(1.0f, std::fabs(want_lse[i]))) << "lse element " << i;

  // Backward: each pair adds its share of dq, dk and dv; their sums are the whole sequence's.
  auto dout_v = randn(want.size(), 51);
  std::vector<float> want_d(qkv_v.size()), got(qkv_v.size(), 0.0f);
  const Tensor dout(dout_v.data(), {B, T, qw}), w_out(want.data(), {B, T, qw}), w_lse(want_lse.data(), {B, H, T});
  attention_backward(S, Tensor(want_d.data(), {B, T, row}), dout, qkv, w_out, w_lse, H, Hkv);
  const Tensor g(got.data(), {B, T, row});
  for (int a = 0; a < n; ++a)
    for (int b = 0; b <= a; ++b)
      attention_block_backward(S, {g, 0, a * c, c}, {g, qw, b * c, c}, {g, qw + kvw, b * c, c}, {dout, 0, a * c, c},
                               {qkv, 0, a * c, c}, {qkv, qw, b * c, c}, {qkv, qw + kvw, b * c, c},
                               {w_out, 0, a * c, c}, w_lse, heads, a == b);
  float largest = 0.0f;
  for (float x : want_d) largest = std::max(largest, std::fabs(x));
  const float d_tol = scale == 1.0f ? 1e-5f * std::max(1.0f, largest / 10) : 5e-5f * scale * largest / 10;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want_d[i], d_tol) << "dqkv element " << i;
}

INSTANTIATE_TEST_SUITE_P(Chunks, AttentionBlocks,
                         ::testing::Values(Case{2, 4, 5, 2, 2, 4}, Case{1, 4, 70, 4, 2, 8}, Case{1, 8, 5, 4, 1, 8},
                                           Case{2, 2, 64, 2, 2, 16}, Case{2, 4, 5, 2, 2, 4, 1.0f, true},
                                           Case{1, 4, 70, 4, 2, 8, 12.0f, false}, Case{1, 4, 70, 4, 2, 8, 12.0f, true}));

// The merge itself against float64: two partial attentions whose log-sum-exps are near 200 and 90
// (e^200 overflows a float: without the shift by their maximum the merge is inf/NaN), merged in
// both orders, each equal to (e^a·o + e^c·p) / (e^a + e^c) and log(e^a + e^c) in double.
TEST(AttentionBlocks, TheMergeOfLargeLogSumExpsIsTheFloat64OneInBothOrders) {
  const int B = 2, T = 3, H = 2, D = 5, n = B * T * H * D;
  const auto o0 = randn(n, 53), p0 = randn(n, 54), noise = randn(B * H * T, 55);
  std::vector<float> la0(B * H * T), lc0(la0.size());
  for (size_t i = 0; i < la0.size(); ++i) la0[i] = 200.0f + noise[i], lc0[i] = (i % 2 ? 90.0f : 200.5f) - noise[i];
  const AttnHeads heads{H, H, D};
  for (const bool swap : {false, true}) {
    std::vector<float> o = swap ? p0 : o0, p = swap ? o0 : p0, la = swap ? lc0 : la0, lc = swap ? la0 : lc0;
    const Tensor to(o.data(), {B, T, H * D}), tp(p.data(), {B, T, H * D});
    attention_merge(S, {to, 0, 0, T}, Tensor(la.data(), {B, H, T}), {tp, 0, 0, T}, Tensor(lc.data(), {B, H, T}), heads);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t) {
          const size_t l = (static_cast<size_t>(b) * H + h) * T + t;
          const double ea = std::exp(double{la0[l]}), ec = std::exp(double{lc0[l]});
          ASSERT_NEAR(la[l], std::log(ea + ec), 1e-5 * 200) << "lse " << l << (swap ? " swapped" : "");
          for (int e = 0; e < D; ++e) {
            const size_t i = ((static_cast<size_t>(b) * T + t) * H + h) * D + e;
            ASSERT_NEAR(o[i], (ea * o0[i] + ec * p0[i]) / (ea + ec), 1e-6) << "out " << i << (swap ? " swapped" : "");
          }
        }
  }
}

// Row copy: rows [2, 5) of a strided view into rows [1, 4) of another (width 6 from column 3), then
// added once more: every element of those rows is the source's, then twice it; nothing else moves.
TEST(AttentionBlocks, RowCopyCopiesAndAddsExactlyTheRowsAndColumnsNamed) {
  const int B = 2, T = 6, W = 10;
  const auto src_v = randn(B * T * W, 56);
  std::vector<float> dst(B * T * W, -7.0f);
  const Tensor src(const_cast<float*>(src_v.data()), {B, T, W}), d(dst.data(), {B, T, W});
  for (const bool add : {false, true}) {
    attention_rows_copy(S, {d, 3, 1, 3}, {src, 3, 2, 3}, 6, add);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < W; ++c) {
          const float x = dst[(static_cast<size_t>(b) * T + t) * W + c];
          const bool named = t >= 1 && t < 4 && c >= 3 && c < 9;
          const float s = src_v[(static_cast<size_t>(b) * T + t + 1) * W + c];
          ASSERT_EQ(x, named ? (add ? s + s : s) : -7.0f) << b << " " << t << " " << c << (add ? " added" : "");
        }
  }
}

// The pieces are not a relabelled whole: a chunk pair below the diagonal attended with the causal
// mask (as if its positions were equal) gives another output.
TEST(AttentionBlocks, AMaskOnAnOffDiagonalPairChangesTheResult) {
  const int B = 1, c = 5, H = 2, D = 4, row = 3 * H * D;
  auto qkv_v = randn(static_cast<size_t>(B) * 2 * c * row, 52);
  const Tensor qkv(qkv_v.data(), {B, 2 * c, row});
  std::vector<float> a(static_cast<size_t>(2 * c * H * D)), b(a.size()), la(static_cast<size_t>(H * 2 * c)), lb(la.size());
  const AttnRows q{qkv, 0, c, c}, k{qkv, H * D, 0, c}, v{qkv, 2 * H * D, 0, c};
  attention_block_forward(S, {Tensor(a.data(), {B, 2 * c, H * D}), 0, c, c}, Tensor(la.data(), {B, H, 2 * c}), q, k, v,
                          {H, H, D}, false);
  attention_block_forward(S, {Tensor(b.data(), {B, 2 * c, H * D}), 0, c, c}, Tensor(lb.data(), {B, H, 2 * c}), q, k, v,
                          {H, H, D}, true);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace megatrain
