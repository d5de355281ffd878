// Context parallelism's attention, piece by piece on one process: the sequence cut into 2·cp chunks
// (parallel/context_parallel.h), each chunk's queries attending to each earlier-or-equal chunk's
// keys through attention_block_forward (the causal mask on the diagonal pair, none below it), the
// pieces merged by their log-sum-exp (attention_merge) — against the whole sequence's attention
// for every chunk; the backward pieces summed against the whole sequence's gradients. Chunk lengths
// 5 and 70 put the chunk borders inside and across the kernels' 64-row blocks.
#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "parallel/context_parallel.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {
using test::randn;

const Stream S = Stream::cpu();

struct Case {
  int B, chunks, c, H, Hkv, D;  // `chunks` of c rows each
};

class AttentionBlocks : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionBlocks, ChunkPairsMergedAreTheWholeSequence) {
  const auto [B, n, c, H, Hkv, D] = GetParam();
  const int T = n * c, row = (H + 2 * Hkv) * D, qw = H * D, kvw = Hkv * D;
  auto qkv_v = randn(static_cast<size_t>(B) * T * row, 50);
  std::vector<float> want(static_cast<size_t>(B) * T * qw), want_lse(static_cast<size_t>(B) * H * T);
  const Tensor qkv(qkv_v.data(), {B, T, row});
  attention_forward(S, Tensor(want.data(), {B, T, qw}), Tensor(want_lse.data(), {B, H, T}), qkv, H, Hkv);

  std::vector<float> out(want.size()), lse(want_lse.size()), part(want.size()), part_lse(want_lse.size());
  const Tensor o(out.data(), {B, T, qw}), l(lse.data(), {B, H, T}), p(part.data(), {B, T, qw}),
      pl(part_lse.data(), {B, H, T});
  const AttnHeads heads{H, Hkv, D};
  for (int a = 0; a < n; ++a)  // chunk a's queries over chunks 0 … a
    for (int b = 0; b <= a; ++b) {
      const AttnRows q{qkv, 0, a * c, c}, k{qkv, qw, b * c, c}, v{qkv, qw + kvw, b * c, c};
      if (b == 0) {
        attention_block_forward(S, {o, 0, a * c, c}, l, q, k, v, heads, a == b);
      } else {
        attention_block_forward(S, {p, 0, a * c, c}, pl, q, k, v, heads, a == b);
        attention_merge(S, {o, 0, a * c, c}, l, {p, 0, a * c, c}, pl, heads);
      }
    }
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-6) << "out element " << i;
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], want_lse[i], 2e-6) << "lse element " << i;

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
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want_d[i], 1e-5) << "dqkv element " << i;
}

INSTANTIATE_TEST_SUITE_P(Chunks, AttentionBlocks,
                         ::testing::Values(Case{2, 4, 5, 2, 2, 4}, Case{1, 4, 70, 4, 2, 8}, Case{1, 8, 5, 4, 1, 8},
                                           Case{2, 2, 64, 2, 2, 16}));

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

// Megatron's balanced split: every rank's queries see the same number of keys under the causal mask
// (Σ over its positions p of p + 1), where a contiguous split gives the last rank cp² / … times the
// first's; and the split's bookkeeping (positions, the loader's rows, runs of positions).
TEST(CpSplit, EveryRankDoesTheSameCausalWork) {
  for (int cp : {2, 3, 4, 8}) {
    const int T = 2 * cp * 6;
    std::vector<int64_t> balanced, contiguous;
    for (int r = 0; r < cp; ++r) {
      const CpSplit s{cp, r, T};
      int64_t work = 0, naive = 0;
      for (int t = 0; t < s.local_len(); ++t) {
        work += s.position(t) + 1;
        naive += r * s.local_len() + t + 1;
      }
      balanced.push_back(work);
      contiguous.push_back(naive);
    }
    for (int r = 1; r < cp; ++r) EXPECT_EQ(balanced[static_cast<size_t>(r)], balanced[0]) << "cp " << cp << " rank " << r;
    EXPECT_GT(contiguous.back(), 2 * contiguous.front()) << "cp " << cp;
  }
}

TEST(CpSplit, RanksHoldChunkAndMirrorAndTogetherEveryPosition) {
  const int cp = 4, T = 16, B = 2;  // chunks of 2
  std::vector<int32_t> full(static_cast<size_t>(B * T));
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<int32_t>(i);
  std::vector<int> seen(static_cast<size_t>(T), 0);
  for (int r = 0; r < cp; ++r) {
    const CpSplit s{cp, r, T};
    std::vector<int32_t> local(static_cast<size_t>(B * s.local_len()));
    s.take_local(full.data(), local.data(), B);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < s.local_len(); ++t) {
        EXPECT_EQ(local[static_cast<size_t>(b * s.local_len() + t)], b * T + s.position(t));
        if (b == 0) ++seen[static_cast<size_t>(s.position(t))];
      }
  }
  EXPECT_EQ(CpSplit({4, 1, 16}).position(0), 2);   // chunk 1
  EXPECT_EQ(CpSplit({4, 1, 16}).position(2), 12);  // chunk 2·4 − 1 − 1 = 6
  for (int n : seen) EXPECT_EQ(n, 1);
}

TEST(CpSplit, PositionRunsBreakAtChunkAndSequenceEnds) {
  const CpSplit s{2, 0, 8};  // rank 0: chunks 0 and 3 (positions 0-1, 6-7); local sequences of 4 rows
  std::vector<std::tuple<int64_t, int64_t, int>> runs;
  for_each_position_run(s, 3, 6, [&](int64_t first, int64_t n, int pos) { runs.emplace_back(first, n, pos); });
  // Rows 3…8 of two sequences: local t = 3 | 0 1 | 2 3 | 0.
  EXPECT_EQ(runs, (std::vector<std::tuple<int64_t, int64_t, int>>{{0, 1, 7}, {1, 2, 0}, {3, 2, 6}, {5, 1, 0}}));
}

}  // namespace
}  // namespace megatrain
