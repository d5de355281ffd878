// Attention with document boundaries (several documents packed into a sequence; kernels/ops.h
// first_key): forward against a float64 reference with a block-diagonal causal mask, backward
// against central differences of it on every coordinate; documents ending inside and across the
// kernel's 128-row blocks, and a whole key block before a query block's documents (the skip);
// boundaries in one kernel direction only fail. The block form: a sequence cut into chunks, each
// chunk's queries over earlier chunks with first_key in the key tensor's rows, merged, equals the
// whole sequence's — including query rows that see no key of a block (lse −∞, weight 0 in the merge).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/ops.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {
using test::randn;

const Stream S = Stream::cpu();

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// starts (B, T): the first position of each position's document.
std::vector<double> masked_attention(const std::vector<double>& qkv, const std::vector<int32_t>& starts, int B, int T,
                                     int H, int Hkv, int D) {
  const int row = (H + 2 * Hkv) * D;
  std::vector<double> out(static_cast<size_t>(B) * T * H * D, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int kvh = h / (H / Hkv);
      for (int i = 0; i < T; ++i) {
        const int first = starts[static_cast<size_t>(b * T + i)];
        std::vector<double> s(static_cast<size_t>(i + 1 - first));
        double mx = -1e300;
        for (int j = first; j <= i; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d)
            acc += qkv[static_cast<size_t>((b * T + i) * row + h * D + d)] *
                   qkv[static_cast<size_t>((b * T + j) * row + (H + kvh) * D + d)];
          s[static_cast<size_t>(j - first)] = acc / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[static_cast<size_t>(j - first)]);
        }
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (int j = first; j <= i; ++j)
          for (int d = 0; d < D; ++d)
            out[static_cast<size_t>(((b * T + i) * H + h) * D + d)] +=
                s[static_cast<size_t>(j - first)] / sum *
                qkv[static_cast<size_t>((b * T + j) * row + (H + Hkv + kvh) * D + d)];
      }
    }
  return out;
}

// The starts of documents whose lengths repeat `lengths` over each of B sequences of T (sequence b
// begins `b` entries into the list, so the sequences differ).
std::vector<int32_t> document_starts(int B, int T, const std::vector<int>& lengths) {
  std::vector<int32_t> starts(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    size_t k = static_cast<size_t>(b) % lengths.size();
    int start = 0, left = lengths[k];
    for (int t = 0; t < T; ++t) {
      if (left == 0) {
        k = (k + 1) % lengths.size();
        start = t;
        left = lengths[k];
      }
      starts[static_cast<size_t>(b * T + t)] = start;
      --left;
    }
  }
  return starts;
}

struct Case {
  int B, T, H, Hkv, D;
  std::vector<int> lengths;
};

class DocumentAttention : public ::testing::TestWithParam<Case> {};

TEST_P(DocumentAttention, ForwardIsTheBlockDiagonalCausalReference) {
  const Case& c = GetParam();
  const int row = (c.H + 2 * c.Hkv) * c.D;
  auto qkv = randn(static_cast<size_t>(c.B) * c.T * row, 60);
  auto starts = document_starts(c.B, c.T, c.lengths);
  std::vector<float> out(static_cast<size_t>(c.B) * c.T * c.H * c.D), lse(static_cast<size_t>(c.B) * c.H * c.T);
  attention_forward(S, Tensor(out.data(), {c.B, c.T, c.H * c.D}), Tensor(lse.data(), {c.B, c.H, c.T}),
                    Tensor(qkv.data(), {c.B, c.T, row}), c.H, c.Hkv, Tensor(starts.data(), {c.B, c.T}));
  test::expect_near_all(out, masked_attention(test::to_double(qkv), starts, c.B, c.T, c.H, c.Hkv, c.D), 2e-5, 1e-4,
                        "document attention out");
}

INSTANTIATE_TEST_SUITE_P(
    Documents, DocumentAttention,
    ::testing::Values(Case{1, 9, 2, 2, 4, {3, 1, 5}},           // one block, a document of one token
                      Case{2, 300, 4, 2, 8, {40, 90, 7, 200}},  // ends inside and across 128-row blocks
                      Case{1, 400, 2, 1, 8, {300, 100}},        // a whole key block before the documents
                      Case{1, 256, 2, 2, 8, {128, 128}}));      // boundaries on the block edges

// Every coordinate of dqkv against central differences of the float64 reference.
TEST(DocumentAttentionBackward, MatchesCentralDifferencesOnEveryCoordinate) {
  for (const Case& c : {Case{1, 9, 2, 2, 4, {3, 1, 5}}, Case{2, 12, 4, 2, 4, {5, 7}}}) {
    const int row = (c.H + 2 * c.Hkv) * c.D;
    auto qkv = randn(static_cast<size_t>(c.B) * c.T * row, 61);
    auto r = randn(static_cast<size_t>(c.B) * c.T * c.H * c.D, 62);
    auto starts = document_starts(c.B, c.T, c.lengths);
    std::vector<float> out(r.size()), lse(static_cast<size_t>(c.B) * c.H * c.T), dqkv(qkv.size());
    const Tensor first(starts.data(), {c.B, c.T});
    attention_forward(S, Tensor(out.data(), {c.B, c.T, c.H * c.D}), Tensor(lse.data(), {c.B, c.H, c.T}),
                      Tensor(qkv.data(), {c.B, c.T, row}), c.H, c.Hkv, first);
    attention_backward(S, Tensor(dqkv.data(), {c.B, c.T, row}), Tensor(r.data(), {c.B, c.T, c.H * c.D}),
                       Tensor(qkv.data(), {c.B, c.T, row}), Tensor(out.data(), {c.B, c.T, c.H * c.D}),
                       Tensor(lse.data(), {c.B, c.H, c.T}), c.H, c.Hkv, first);
    const auto loss = [&](const std::vector<double>& v) {
      return test::dot(masked_attention(v, starts, c.B, c.T, c.H, c.Hkv, c.D), r);
    };
    test::expect_grad(dqkv, test::fd_grad(test::to_double(qkv), loss), "document dqkv");
  }
}

// Gradients over sequences longer than a block (where the backward's block skip acts) against the
// reference's, by the gradient of a long sequence cut into its documents run one by one.
TEST(DocumentAttentionBackward, IsEachDocumentOnItsOwnAcrossBlocks) {
  const int T = 400, H = 2, Hkv = 1, D = 8, row = (H + 2 * Hkv) * D;
  const std::vector<int> lengths{300, 100};  // the second document's queries skip key blocks 0 and 1
  auto qkv = randn(static_cast<size_t>(T) * row, 63);
  auto r = randn(static_cast<size_t>(T) * H * D, 64);
  auto starts = document_starts(1, T, lengths);
  std::vector<float> out(r.size()), lse(static_cast<size_t>(H) * T), dqkv(qkv.size());
  attention_forward(S, Tensor(out.data(), {1, T, H * D}), Tensor(lse.data(), {1, H, T}),
                    Tensor(qkv.data(), {1, T, row}), H, Hkv, Tensor(starts.data(), {1, T}));
  attention_backward(S, Tensor(dqkv.data(), {1, T, row}), Tensor(r.data(), {1, T, H * D}),
                     Tensor(qkv.data(), {1, T, row}), Tensor(out.data(), {1, T, H * D}), Tensor(lse.data(), {1, H, T}),
                     H, Hkv, Tensor(starts.data(), {1, T}));
  int start = 0;
  for (int len : lengths) {  // each document as a sequence of its own, no boundaries
    std::vector<float> q(qkv.begin() + start * row, qkv.begin() + (start + len) * row);
    std::vector<float> g(r.begin() + start * H * D, r.begin() + (start + len) * H * D);
    std::vector<float> o(g.size()), l(static_cast<size_t>(H) * len), dq(q.size());
    attention_forward(S, Tensor(o.data(), {1, len, H * D}), Tensor(l.data(), {1, H, len}),
                      Tensor(q.data(), {1, len, row}), H, Hkv);
    attention_backward(S, Tensor(dq.data(), {1, len, row}), Tensor(g.data(), {1, len, H * D}),
                       Tensor(q.data(), {1, len, row}), Tensor(o.data(), {1, len, H * D}),
                       Tensor(l.data(), {1, H, len}), H, Hkv);
    for (size_t i = 0; i < dq.size(); ++i)
      ASSERT_NEAR(dqkv[static_cast<size_t>(start * row) + i], dq[i], 2e-5)
          << "document at " << start << ", element " << i;
    for (size_t i = 0; i < o.size(); ++i)
      ASSERT_NEAR(out[static_cast<size_t>(start * H * D) + i], o[i], 2e-6) << "document at " << start << ", out " << i;
    start += len;
  }
}

// A sequence of 4 chunks: chunk a's queries over chunks 0 … a, block by block with first_key
// numbered in the key tensor's rows (the whole sequence's here), merged — the whole sequence's
// document attention. Documents cross chunk borders, and a chunk's queries see nothing of some
// earlier chunks (lse −∞ there).
TEST(DocumentAttentionBlocks, ChunkPairsMergedAreTheWholeSequence) {
  const int B = 2, n = 4, c = 70, T = n * c, H = 2, Hkv = 1, D = 8, row = (H + 2 * Hkv) * D, qw = H * D, kvw = Hkv * D;
  auto qkv_v = randn(static_cast<size_t>(B) * T * row, 65);
  auto starts = document_starts(B, T, {90, 30, 150, 5});
  const Tensor qkv(qkv_v.data(), {B, T, row}), first(starts.data(), {B, T});
  std::vector<float> want(static_cast<size_t>(B) * T * qw), want_lse(static_cast<size_t>(B) * H * T);
  attention_forward(S, Tensor(want.data(), {B, T, qw}), Tensor(want_lse.data(), {B, H, T}), qkv, H, Hkv, first);
  std::vector<float> out(want.size()), lse(want_lse.size()), part(want.size()), part_lse(want_lse.size());
  const Tensor o(out.data(), {B, T, qw}), l(lse.data(), {B, H, T}), p(part.data(), {B, T, qw}),
      pl(part_lse.data(), {B, H, T});
  const AttnHeads heads{H, Hkv, D};
  for (int a = 0; a < n; ++a)
    for (int b = a; b >= 0; --b) {  // the own chunk first (every row sees itself), then older ones
      const AttnRows q{qkv, 0, a * c, c}, k{qkv, qw, b * c, c}, v{qkv, qw + kvw, b * c, c};
      if (b == a) {
        attention_block_forward(S, {o, 0, a * c, c}, l, q, k, v, heads, true, first);
      } else {
        attention_block_forward(S, {p, 0, a * c, c}, pl, q, k, v, heads, false, first);
        attention_merge(S, {o, 0, a * c, c}, l, {p, 0, a * c, c}, pl, heads);
      }
    }
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-6) << "out " << i;
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], want_lse[i], 2e-6) << "lse " << i;
}

// The boundaries matter in each direction: the forward without them, or a backward without them
// after a forward with them, gives another result.
TEST(DocumentAttention, BoundariesIgnoredInEitherDirectionChangeTheResult) {
  const int T = 12, H = 2, Hkv = 2, D = 4, row = (H + 2 * Hkv) * D;
  auto qkv = randn(static_cast<size_t>(T) * row, 66);
  auto r = randn(static_cast<size_t>(T) * H * D, 67);
  auto starts = document_starts(1, T, {5, 7});
  const Tensor first(starts.data(), {1, T}), x(qkv.data(), {1, T, row}), g(r.data(), {1, T, H * D});
  std::vector<float> out(r.size()), plain(r.size()), lse(static_cast<size_t>(H) * T), dq(qkv.size()),
      dq_plain(qkv.size());
  const Tensor o(out.data(), {1, T, H * D}), l(lse.data(), {1, H, T});
  attention_forward(S, Tensor(plain.data(), {1, T, H * D}), l, x, H, Hkv);
  attention_forward(S, o, l, x, H, Hkv, first);
  EXPECT_GT(max_abs_diff(out, plain), 1e-3);
  attention_backward(S, Tensor(dq.data(), {1, T, row}), g, x, o, l, H, Hkv, first);
  attention_backward(S, Tensor(dq_plain.data(), {1, T, row}), g, x, o, l, H, Hkv);
  EXPECT_GT(max_abs_diff(dq, dq_plain), 1e-3);
}

}  // namespace
}  // namespace megatrain
