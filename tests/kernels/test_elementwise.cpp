// gelu, swiglu, rope, embedding, residual add, cross-entropy, dropout, AdamW, scaling, sum of
// squares: naive double references, and central differences of those references on every
// coordinate for the backward ops (tolerances: tests/kernels/op_harness.h).
#include <cmath>

#include "kernels/ops.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {
using test::expect_grad;
using test::fd_grad;
using test::randn;
using test::to_double;

const Stream S = Stream::cpu();

double gelu(double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }

TEST(Gelu, MatchesTanhFormulaAndCentralDifferences) {
  const int n = 300;
  auto x = randn(n, 20, 3.0f), r = randn(n, 21);
  std::vector<float> out(n), dx(n);
  gelu_forward(S, Tensor(out.data(), {n}), Tensor(x.data(), {n}));
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = gelu(x[i]);
  test::expect_near_all(out, want, 1e-6, 1e-5, "gelu");
  gelu_backward(S, Tensor(dx.data(), {n}), Tensor(r.data(), {n}), Tensor(x.data(), {n}));
  expect_grad(dx,
              fd_grad(to_double(x),
                      [&](const std::vector<double>& v) {
                        double l = 0;
                        for (int i = 0; i < n; ++i) l += gelu(v[i]) * r[i];
                        return l;
                      }),
              "gelu dinp");
}

TEST(SwiGlu, MatchesFormulaAndCentralDifferences) {
  const int N = 3, F = 17;
  auto x = randn(N * 2 * F, 22, 2.0f), r = randn(N * F, 23);
  std::vector<float> out(N * F), dx(N * 2 * F);
  swiglu_forward(S, Tensor(out.data(), {N, F}), Tensor(x.data(), {N, 2 * F}));
  const auto swiglu = [&](const std::vector<double>& v, int i, int j) {
    const double g = v[i * 2 * F + j], u = v[i * 2 * F + F + j];
    return g / (1 + std::exp(-g)) * u;
  };
  std::vector<double> want(N * F);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < F; ++j) want[i * F + j] = swiglu(to_double(x), i, j);
  test::expect_near_all(out, want, 1e-6, 1e-5, "swiglu");
  swiglu_backward(S, Tensor(dx.data(), {N, 2 * F}), Tensor(r.data(), {N, F}), Tensor(x.data(), {N, 2 * F}));
  expect_grad(dx,
              fd_grad(to_double(x),
                      [&](const std::vector<double>& v) {
                        double l = 0;
                        for (int i = 0; i < N; ++i)
                          for (int j = 0; j < F; ++j) l += swiglu(v, i, j) * r[i * F + j];
                        return l;
                      }),
              "swiglu dinp");
}

TEST(Rope, RotateHalfConventionAndInverse) {
  const int B = 2, T = 5, H = 2, Hkv = 1, D = 8;
  const int row = (H + 2 * Hkv) * D;
  auto x = randn(B * T * row, 24);
  auto y = x;
  rope_apply(S, Tensor(y.data(), {B, T, row}), H, Hkv, RopeFrequencies{10000.0}, RopeDirection::forward);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H + 2 * Hkv; ++h)
        for (int j = 0; j < D; ++j) {
          const size_t base = (static_cast<size_t>(b) * T + t) * row + h * D;
          double want = x[base + j];
          if (h < H + Hkv) {  // q and k rotate, v does not
            const int jj = j % (D / 2);
            const double a = t * std::pow(10000.0, -2.0 * jj / D);
            const double rot = j < D / 2 ? -x[base + j + D / 2] : x[base + j - D / 2];
            want = x[base + j] * std::cos(a) + rot * std::sin(a);
          }
          ASSERT_NEAR(y[base + j], want, 1e-5) << "b" << b << " t" << t << " h" << h << " j" << j;
        }
  rope_apply(S, Tensor(y.data(), {B, T, row}), H, Hkv, RopeFrequencies{10000.0}, RopeDirection::backward);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5);
}

// With a position offset, row t is rotated as position pos0 + t: the same as rows pos0 … of a
// sequence that starts at 0 (incremental decoding), bitwise.
TEST(Rope, PositionOffsetMatchesTheRowsOfALongerSequence) {
  const int T = 7, pos0 = 4, n = 3, H = 2, Hkv = 1, D = 8;
  const int row = (H + 2 * Hkv) * D;
  auto full = randn(T * row, 29);
  std::vector<float> part(full.begin() + pos0 * row, full.begin() + (pos0 + n) * row);
  const auto orig = part;
  rope_apply(S, Tensor(full.data(), {1, T, row}), H, Hkv, RopeFrequencies{500.0}, RopeDirection::forward);
  rope_apply(S, Tensor(part.data(), {1, n, row}), H, Hkv, RopeFrequencies{500.0}, RopeDirection::forward, pos0);
  for (int i = 0; i < n * row; ++i)
    ASSERT_EQ(part[static_cast<size_t>(i)], full[static_cast<size_t>(pos0 * row + i)]) << i;
  rope_apply(S, Tensor(part.data(), {1, n, row}), H, Hkv, RopeFrequencies{500.0}, RopeDirection::backward, pos0);
  for (int i = 0; i < n * row; ++i) ASSERT_NEAR(part[static_cast<size_t>(i)], orig[static_cast<size_t>(i)], 1e-5);
}

TEST(Embedding, ForwardAndBackwardScatterOfAVocabularyShard) {
  const int B = 2, T = 3, C = 4, V = 5, first = 2;  // this shard holds ids [2, 7)
  std::vector<int32_t> tok = {3, 6, 1, 0, 2, 8};
  auto wte = randn(V * C, 25), dout = randn(B * T * C, 27);
  std::vector<float> out(B * T * C, 9.0f), dwte(V * C, 0.5f);  // `=` into out, `+=` into dwte
  embedding_forward(S, Tensor(out.data(), {B, T, C}), Tensor(tok.data(), {B, T}), Tensor(wte.data(), {V, C}), first);
  for (int i = 0; i < B * T; ++i) {
    const bool mine = tok[i] >= first && tok[i] < first + V;
    for (int c = 0; c < C; ++c) ASSERT_EQ(out[i * C + c], mine ? wte[(tok[i] - first) * C + c] : 0.0f) << i;
  }
  embedding_backward(S, Tensor(dwte.data(), {V, C}), Tensor(dout.data(), {B, T, C}), Tensor(tok.data(), {B, T}), first);
  std::vector<double> want(V * C, 0.5);
  for (int i = 0; i < B * T; ++i)
    if (tok[i] >= first && tok[i] < first + V)
      for (int c = 0; c < C; ++c) want[(tok[i] - first) * C + c] += dout[i * C + c];
  test::expect_near_all(dwte, want, 1e-6, 1e-6, "dwte");
}

TEST(Embedding, PositionsFollowTheGlobalRowOfAShard) {
  const int T = 4, C = 3, P = 6, n = 6, first_row = 3;  // rows 3..8 of sequences of 4
  auto wpe = randn(P * C, 26), dout = randn(n * C, 29);
  std::vector<float> out(n * C, 1.0f), dwpe(P * C, 0.25f);
  position_embedding_forward(S, Tensor(out.data(), {n, C}), Tensor(wpe.data(), {P, C}), T, first_row);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) ASSERT_EQ(out[i * C + c], 1.0f + wpe[((first_row + i) % T) * C + c]) << i;
  position_embedding_backward(S, Tensor(dwpe.data(), {P, C}), Tensor(dout.data(), {n, C}), T, first_row);
  std::vector<double> want(P * C, 0.25);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) want[((first_row + i) % T) * C + c] += dout[i * C + c];
  test::expect_near_all(dwpe, want, 1e-6, 1e-6, "dwpe");
}

namespace {
// The three cross-entropy steps on one vocabulary shard [first, first + V) of which `valid` are real,
// with given global statistics (or this shard's own when it is the whole vocabulary).
struct LossSteps {
  int64_t N;
  std::vector<float> row_max, sum_exp, target_logit, losses;
  explicit LossSteps(int64_t n) : N(n), row_max(n), sum_exp(n), target_logit(n), losses(n) {}
  void run(std::vector<float>& logits, std::vector<int32_t>& tgt, int V, int first, int valid, LossGrad grad,
           float scale) {
    const Tensor L(logits.data(), {N, V}), t(tgt.data(), {N});
    cross_entropy_max(S, Tensor(row_max.data(), {N}), L, valid);
    cross_entropy_sums(S, Tensor(sum_exp.data(), {N}), Tensor(target_logit.data(), {N}), L, Tensor(row_max.data(), {N}),
                       t, first, valid, grad);
    cross_entropy_finish(S, Tensor(losses.data(), {N}), L, Tensor(row_max.data(), {N}), Tensor(sum_exp.data(), {N}),
                         Tensor(target_logit.data(), {N}), t, first, valid, grad, scale);
  }
};
}  // namespace

TEST(CrossEntropy, LossExcludesPaddedVocabAndGradientMatches) {
  const int N = 4, V = 10, Vp = 16;
  auto logits = randn(N * Vp, 28, 2.0f);
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) logits[i * Vp + j] = 50.0f;  // would dominate if not excluded
  std::vector<int32_t> tgt = {0, 9, 3, 3};
  LossSteps steps(N);
  {
    auto copy = logits;
    steps.run(copy, tgt, Vp, 0, V, LossGrad::none, 0.0f);
  }
  // Σ of the token losses in double, over the real vocabulary only.
  const auto ref_loss = [&](const std::vector<double>& z) {
    double total = 0;
    for (int i = 0; i < N; ++i) {
      double mx = -1e300, sum = 0;
      for (int j = 0; j < V; ++j) mx = std::max(mx, z[i * Vp + j]);
      for (int j = 0; j < V; ++j) sum += std::exp(z[i * Vp + j] - mx);
      total += std::log(sum) + mx - z[i * Vp + tgt[i]];
    }
    return total;
  };
  for (int i = 0; i < N; ++i) {
    std::vector<double> one(to_double(logits));
    double mx = -1e300, sum = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, one[i * Vp + j]);
    for (int j = 0; j < V; ++j) sum += std::exp(one[i * Vp + j] - mx);
    EXPECT_NEAR(steps.losses[i], std::log(sum) + mx - one[i * Vp + tgt[i]], 1e-5);
  }
  auto grad = logits;
  steps.run(grad, tgt, Vp, 0, V, LossGrad::in_place, 1.0f);
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) EXPECT_EQ(grad[i * Vp + j], 0.0f);
  expect_grad(grad, fd_grad(to_double(logits), ref_loss), "dlogits");
}

// Two shards of 8 columns ([0, 8) and [8, 16), of which 10 real words), combined as the
// tensor-parallel loss combines them (max, then sums), give the one-shard losses and gradients.
TEST(CrossEntropy, ShardsCombinedByMaxAndSumEqualTheWholeVocabulary) {
  const int N = 5, V = 10, Vp = 16, Vl = 8;
  auto logits = randn(N * Vp, 31, 3.0f);
  std::vector<int32_t> tgt = {0, 9, 7, 8, 3};
  LossSteps whole(N);
  auto g_whole = logits;
  whole.run(g_whole, tgt, Vp, 0, V, LossGrad::in_place, 0.5f);
  std::vector<std::vector<float>> shard(2, std::vector<float>(N * Vl));
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < Vl; ++j) shard[r][i * Vl + j] = logits[i * Vp + r * Vl + j];
  std::vector<LossSteps> part(2, LossSteps(N));
  const int valid[2] = {8, 2};
  for (int r = 0; r < 2; ++r)
    cross_entropy_max(S, Tensor(part[r].row_max.data(), {N}), Tensor(shard[r].data(), {N, Vl}), valid[r]);
  std::vector<float> mx(N), sum(N), tl(N);
  for (int i = 0; i < N; ++i) mx[i] = std::max(part[0].row_max[i], part[1].row_max[i]);
  for (int r = 0; r < 2; ++r)
    cross_entropy_sums(S, Tensor(part[r].sum_exp.data(), {N}), Tensor(part[r].target_logit.data(), {N}),
                       Tensor(shard[r].data(), {N, Vl}), Tensor(mx.data(), {N}), Tensor(tgt.data(), {N}), r * Vl,
                       valid[r], LossGrad::in_place);
  for (int i = 0; i < N; ++i) {
    sum[i] = part[0].sum_exp[i] + part[1].sum_exp[i];
    tl[i] = part[0].target_logit[i] + part[1].target_logit[i];
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<float> losses(N);
    cross_entropy_finish(S, Tensor(losses.data(), {N}), Tensor(shard[r].data(), {N, Vl}), Tensor(mx.data(), {N}),
                         Tensor(sum.data(), {N}), Tensor(tl.data(), {N}), Tensor(tgt.data(), {N}), r * Vl, valid[r],
                         LossGrad::in_place, 0.5f);
    for (int i = 0; i < N; ++i) {
      EXPECT_NEAR(losses[i], whole.losses[i], 1e-6) << "rank " << r << " row " << i;
      for (int j = 0; j < Vl; ++j)
        EXPECT_NEAR(shard[r][i * Vl + j], g_whole[i * Vp + r * Vl + j], 1e-7) << r << " " << i << " " << j;
    }
  }
}

TEST(Add, ResidualAddIsElementwiseAndMayWriteInPlace) {
  const int n = 1037;  // not a multiple of any vector width
  auto a = randn(n, 34), b = randn(n, 35);
  std::vector<float> out(n);
  add_forward(S, Tensor(out.data(), {n}), Tensor(a.data(), {n}), Tensor(b.data(), {n}));
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  add_forward(S, Tensor(a.data(), {n}), Tensor(a.data(), {n}), Tensor(b.data(), {n}));
  EXPECT_EQ(a, out);
}

TEST(Scale, ScalesEveryElementIncludingTheTail) {
  const int n = 1037;
  auto x = randn(n, 36);
  const auto orig = x;
  scale_inplace(S, Tensor(x.data(), {n}), 0.375f);
  for (int i = 0; i < n; ++i) ASSERT_EQ(x[i], orig[i] * 0.375f) << i;
}

TEST(Dropout, ReproducibleUnbiasedAndKeyed) {
  const int n = 100000;
  std::vector<float> a(n, 1.0f), b(n, 1.0f), c(n, 1.0f);
  const RngKey k1{7, static_cast<uint32_t>(RngPurpose::dropout), 3, 0},
      k2{7, static_cast<uint32_t>(RngPurpose::dropout), 4, 0};
  dropout_apply(S, Tensor(a.data(), {n}), 0.25f, k1);
  dropout_apply(S, Tensor(b.data(), {n}), 0.25f, k1);
  dropout_apply(S, Tensor(c.data(), {n}), 0.25f, k2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int zeros = 0;
  double sum = 0;
  for (float v : a) {
    zeros += v == 0.0f;
    sum += v;
    ASSERT_TRUE(v == 0.0f || std::fabs(v - 1.0f / 0.75f) < 1e-6);
  }
  EXPECT_NEAR(zeros / static_cast<double>(n), 0.25, 0.01);
  EXPECT_NEAR(sum / n, 1.0, 0.01);
}

// A slice given its first element's global index as offset draws the slice of the whole mask (the
// sequence-parallel shards of an activation), for slices starting at any position.
TEST(Dropout, ASliceOfTheElementsGetsTheSliceOfTheWholeMask) {
  const int n = 103;
  const RngKey base{9, static_cast<uint32_t>(RngPurpose::dropout), 2, 40};
  std::vector<float> whole(n, 1.0f);
  dropout_apply(S, Tensor(whole.data(), {n}), 0.5f, base);
  for (int first : {0, 1, 6, 37, 101}) {
    const int len = std::min(29, n - first);
    std::vector<float> part(static_cast<size_t>(len), 1.0f);
    RngKey k = base;
    k.offset += static_cast<uint64_t>(first);
    dropout_apply(S, Tensor(part.data(), {len}), 0.5f, k);
    for (int i = 0; i < len; ++i) ASSERT_EQ(part[static_cast<size_t>(i)], whole[first + i]) << first << " " << i;
  }
}

TEST(AdamW, MatchesPyTorchFormula) {
  const int n = 50;
  auto p = randn(n, 29), g = randn(n, 30), m = randn(n, 31, 0.1f), v = randn(n, 32, 0.1f);
  for (auto& x : v) x = x * x;
  auto p0 = p, m0 = m, v0 = v;
  AdamWStep st{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f - std::pow(0.9f, 3.0f), 1.0f - std::pow(0.95f, 3.0f), 0.5f};
  adamw_update(S, {{Tensor(p.data(), {n}), Tensor(g.data(), {n}), Tensor(m.data(), {n}), Tensor(v.data(), {n})}}, st);
  for (int i = 0; i < n; ++i) {
    const double gi = g[i] * 0.5;
    const double mi = 0.9 * m0[i] + 0.1 * gi, vi = 0.95 * v0[i] + 0.05 * gi * gi;
    double pi = p0[i] * (1 - 1e-2 * 0.1);
    pi -= 1e-2 / st.bias_correction1 * mi / (std::sqrt(vi) / std::sqrt(st.bias_correction2) + 1e-8);
    EXPECT_NEAR(m[i], mi, 1e-6);
    EXPECT_NEAR(v[i], vi, 1e-6);
    EXPECT_NEAR(p[i], pi, 1e-5);
  }
}

TEST(SumSquares, MatchesDoubleSum) {
  const int n = 100003;
  auto x = randn(n, 33);
  double want = 0;
  for (float v : x) want += static_cast<double>(v) * v;
  EXPECT_NEAR(sum_squares(S, Tensor(x.data(), {n})), want, want * 1e-5);
}

}  // namespace
}  // namespace megatrain
