// matmul, layernorm, rmsnorm: forward against naive double references; matmul's backward against
// the exact double products (within the float32 rounding bound), the norms' backward against
// central differences of their double references on every coordinate (tests/kernels/op_harness.h).
// Parameter gradients start non-zero: backward must `+=` into them.
#include "kernels/ops.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {
using test::expect_grad;
using test::fd_grad;
using test::FdGrad;
using test::randn;
using test::to_double;

const Stream S = Stream::cpu();

// Subtracts the starting value of a `+=` gradient.
std::vector<float> minus(std::vector<float> v, float start) {
  for (auto& x : v) x -= start;
  return v;
}

TEST(Matmul, ForwardAndBackwardEqualExactProductsWithinRounding) {
  const int N = 7, C = 13, OC = 9;
  auto x = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), r = randn(N * OC, 4);
  std::vector<float> out(N * OC);
  matmul_forward(S, Tensor(out.data(), {N, OC}), Tensor(x.data(), {N, C}), Tensor(w.data(), {OC, C}),
                 Tensor(b.data(), {OC}));
  std::vector<double> want(N * OC), want_abs(N * OC);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      double acc = b[o], abs = std::fabs(b[o]);
      for (int c = 0; c < C; ++c) {
        acc += static_cast<double>(x[i * C + c]) * w[o * C + c];
        abs += std::fabs(static_cast<double>(x[i * C + c]) * w[o * C + c]);
      }
      want[i * OC + o] = acc, want_abs[i * OC + o] = abs;
    }
  test::expect_within_rounding(out, want, want_abs, C + 1, "matmul out");

  std::vector<float> dx(N * C, 9.0f), dw(OC * C, 0.5f), db(OC, 0.25f);  // dinp `=`, the others `+=`
  matmul_backward(S, Tensor(dx.data(), {N, C}), Tensor(dw.data(), {OC, C}), Tensor(db.data(), {OC}),
                  Tensor(r.data(), {N, OC}), Tensor(x.data(), {N, C}), Tensor(w.data(), {OC, C}));
  std::vector<double> want_dx(N * C), abs_dx(N * C), want_dw(OC * C), abs_dw(OC * C), want_db(OC), abs_db(OC);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      const double g = r[i * OC + o];
      want_db[o] += g, abs_db[o] += std::fabs(g);
      for (int c = 0; c < C; ++c) {
        want_dx[i * C + c] += g * w[o * C + c], abs_dx[i * C + c] += std::fabs(g * w[o * C + c]);
        want_dw[o * C + c] += g * x[i * C + c], abs_dw[o * C + c] += std::fabs(g * x[i * C + c]);
      }
    }
  test::expect_within_rounding(dx, want_dx, abs_dx, OC, "dinp");
  // The accumulated gradient rounds once more when the start value is added.
  for (auto& a : abs_dw) a += 0.5;
  for (auto& a : abs_db) a += 0.25;
  test::expect_within_rounding(minus(dw, 0.5f), want_dw, abs_dw, N + 1, "dweight");
  test::expect_within_rounding(minus(db, 0.25f), want_db, abs_db, N + 1, "dbias");
}

// Σ r ∘ layernorm(x; w, b) in double.
double layernorm_loss(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                      const std::vector<float>& r, int N, int C, std::vector<double>* out = nullptr) {
  double loss = 0;
  for (int i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    v /= C;
    for (int c = 0; c < C; ++c) {
      const double y = (x[i * C + c] - m) / std::sqrt(v + 1e-5) * w[c] + b[c];
      if (out) (*out)[i * C + c] = y;
      loss += y * r[i * C + c];
    }
  }
  return loss;
}

TEST(LayerNorm, ForwardMatchesNaiveAndBackwardMatchesCentralDifferencesEverywhere) {
  const int N = 5, C = 70;
  auto x = randn(N * C, 5, 2.0f), w = randn(C, 6), b = randn(C, 7), r = randn(N * C, 8), dres = randn(N * C, 9);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(S, Tensor(out.data(), {N, C}), Tensor(mean.data(), {N}), Tensor(rstd.data(), {N}),
                    Tensor(x.data(), {N, C}), Tensor(w.data(), {C}), Tensor(b.data(), {C}), 1e-5f);
  const auto X = to_double(x), W = to_double(w), B = to_double(b);
  std::vector<double> want(N * C);
  layernorm_loss(X, W, B, r, N, C, &want);
  test::expect_near_all(out, want, 1e-5, 1e-5, "layernorm out");
  std::vector<float> dx(N * C), dw(C, 0.5f), db(C, 0.25f);
  layernorm_backward(S, Tensor(dx.data(), {N, C}), Tensor(dw.data(), {C}), Tensor(db.data(), {C}),
                     Tensor(r.data(), {N, C}), Tensor(dres.data(), {N, C}), Tensor(x.data(), {N, C}),
                     Tensor(w.data(), {C}), Tensor(mean.data(), {N}), Tensor(rstd.data(), {N}));
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dres[i];  // dinp = dresidual + ∂
  expect_grad(dx, fd_grad(X, [&](const auto& v) { return layernorm_loss(v, W, B, r, N, C); }), "dinp");
  expect_grad(minus(dw, 0.5f), fd_grad(W, [&](const auto& v) { return layernorm_loss(X, v, B, r, N, C); }), "dweight");
  expect_grad(minus(db, 0.25f), fd_grad(B, [&](const auto& v) { return layernorm_loss(X, W, v, r, N, C); }), "dbias");
}

// Σ r ∘ rmsnorm(x; w) in double.
double rmsnorm_loss(const std::vector<double>& x, const std::vector<double>& w, const std::vector<float>& r, int N,
                    int C, std::vector<double>* out = nullptr) {
  double loss = 0;
  for (int i = 0; i < N; ++i) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[i * C + c] * x[i * C + c];
    for (int c = 0; c < C; ++c) {
      const double y = x[i * C + c] / std::sqrt(ss / C + 1e-5) * w[c];
      if (out) (*out)[i * C + c] = y;
      loss += y * r[i * C + c];
    }
  }
  return loss;
}

// With and without the residual gradient (the model passes it; dinp = dresidual + ∂).
TEST(RmsNorm, ForwardMatchesNaiveAndBackwardMatchesCentralDifferencesEverywhere) {
  const int N = 4, C = 33;
  auto x = randn(N * C, 10, 1.5f), w = randn(C, 11), r = randn(N * C, 12), dres = randn(N * C, 13);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(S, Tensor(out.data(), {N, C}), Tensor(rstd.data(), {N}), Tensor(x.data(), {N, C}),
                  Tensor(w.data(), {C}), 1e-5f);
  const auto X = to_double(x), W = to_double(w);
  std::vector<double> want(N * C);
  rmsnorm_loss(X, W, r, N, C, &want);
  test::expect_near_all(out, want, 1e-5, 1e-5, "rmsnorm out");
  const FdGrad want_dx = fd_grad(X, [&](const auto& v) { return rmsnorm_loss(v, W, r, N, C); });
  const FdGrad want_dw = fd_grad(W, [&](const auto& v) { return rmsnorm_loss(X, v, r, N, C); });
  for (const bool residual : {false, true}) {
    std::vector<float> dx(N * C), dw(C, 0.5f);
    rmsnorm_backward(S, Tensor(dx.data(), {N, C}), Tensor(dw.data(), {C}), Tensor(r.data(), {N, C}),
                     residual ? Tensor(dres.data(), {N, C}) : Tensor{}, Tensor(x.data(), {N, C}),
                     Tensor(w.data(), {C}), Tensor(rstd.data(), {N}));
    if (residual)
      for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dres[i];
    expect_grad(dx, want_dx, residual ? "dinp with residual" : "dinp");
    expect_grad(minus(dw, 0.5f), want_dw, "dweight");
  }
}

TEST(Ops, ShapeMismatchIsAnErrorNotACrash) {
  std::vector<float> a(6), b(5);
  EXPECT_THROW(matmul_forward(S, Tensor(a.data(), {2, 3}), Tensor(a.data(), {2, 3}), Tensor(b.data(), {5, 1}),
                              Tensor{}),
               Error);
}

}  // namespace
}  // namespace megatrain
