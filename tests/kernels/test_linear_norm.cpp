// matmul, layernorm, rmsnorm: forward against naive double references, backward against
// finite differences.
#include "kernels/ops.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {
using test::check_grad;
using test::dot;
using test::randn;

const Stream S = Stream::cpu();

TEST(Matmul, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  const int N = 7, C = 13, OC = 9;
  auto x = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), r = randn(N * OC, 4);
  std::vector<float> out(N * OC);
  auto fwd = [&] {
    matmul_forward(S, Tensor(out.data(), {N, OC}), Tensor(x.data(), {N, C}), Tensor(w.data(), {OC, C}),
                   Tensor(b.data(), {OC}));
    return dot(out, r);
  };
  fwd();
  std::vector<double> want(N * OC);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      double acc = b[o];
      for (int c = 0; c < C; ++c) acc += static_cast<double>(x[i * C + c]) * w[o * C + c];
      want[i * OC + o] = acc;
    }
  test::expect_near_all(out, want, 1e-5, 1e-5, "matmul out");
  std::vector<float> dx(N * C), dw(OC * C, 0.5f), db(OC, 0.25f);  // += semantics: start non-zero
  matmul_backward(S, Tensor(dx.data(), {N, C}), Tensor(dw.data(), {OC, C}), Tensor(db.data(), {OC}),
                  Tensor(r.data(), {N, OC}), Tensor(x.data(), {N, C}), Tensor(w.data(), {OC, C}));
  for (auto& v : dw) v -= 0.5f;
  for (auto& v : db) v -= 0.25f;
  check_grad(x, dx, fwd, "dinp");
  check_grad(w, dw, fwd, "dweight");
  check_grad(b, db, fwd, "dbias");
}

TEST(LayerNorm, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  const int N = 5, C = 70;
  auto x = randn(N * C, 5, 2.0f), w = randn(C, 6), b = randn(C, 7), r = randn(N * C, 8), dres = randn(N * C, 9);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto fwd = [&] {
    layernorm_forward(S, Tensor(out.data(), {N, C}), Tensor(mean.data(), {N}), Tensor(rstd.data(), {N}),
                      Tensor(x.data(), {N, C}), Tensor(w.data(), {C}), Tensor(b.data(), {C}), 1e-5f);
    return dot(out, r);
  };
  fwd();
  std::vector<double> want(N * C);
  for (int i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    v /= C;
    for (int c = 0; c < C; ++c) want[i * C + c] = (x[i * C + c] - m) / std::sqrt(v + 1e-5) * w[c] + b[c];
  }
  test::expect_near_all(out, want, 1e-4, 1e-4, "layernorm out");
  std::vector<float> dx(N * C), dw(C), db(C);
  layernorm_backward(S, Tensor(dx.data(), {N, C}), Tensor(dw.data(), {C}), Tensor(db.data(), {C}),
                     Tensor(r.data(), {N, C}), Tensor(dres.data(), {N, C}), Tensor(x.data(), {N, C}),
                     Tensor(w.data(), {C}), Tensor(mean.data(), {N}), Tensor(rstd.data(), {N}));
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dres[i];  // dinp = dresidual + ∂
  check_grad(x, dx, fwd, "dinp");
  check_grad(w, dw, fwd, "dweight");
  check_grad(b, db, fwd, "dbias");
}

TEST(RmsNorm, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  const int N = 4, C = 33;
  auto x = randn(N * C, 10, 1.5f), w = randn(C, 11), r = randn(N * C, 12);
  std::vector<float> out(N * C), rstd(N);
  auto fwd = [&] {
    rmsnorm_forward(S, Tensor(out.data(), {N, C}), Tensor(rstd.data(), {N}), Tensor(x.data(), {N, C}),
                    Tensor(w.data(), {C}), 1e-5f);
    return dot(out, r);
  };
  fwd();
  std::vector<double> want(N * C);
  for (int i = 0; i < N; ++i) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += static_cast<double>(x[i * C + c]) * x[i * C + c];
    for (int c = 0; c < C; ++c) want[i * C + c] = x[i * C + c] / std::sqrt(ss / C + 1e-5) * w[c];
  }
  test::expect_near_all(out, want, 1e-4, 1e-4, "rmsnorm out");
  std::vector<float> dx(N * C), dw(C);
  rmsnorm_backward(S, Tensor(dx.data(), {N, C}), Tensor(dw.data(), {C}), Tensor(r.data(), {N, C}), Tensor{},
                   Tensor(x.data(), {N, C}), Tensor(w.data(), {C}), Tensor(rstd.data(), {N}));
  check_grad(x, dx, fwd, "dinp");
  check_grad(w, dw, fwd, "dweight");
}

TEST(Ops, ShapeMismatchIsAnErrorNotACrash) {
  std::vector<float> a(6), b(5);
  EXPECT_THROW(matmul_forward(S, Tensor(a.data(), {2, 3}), Tensor(a.data(), {2, 3}), Tensor(b.data(), {5, 1}),
                              Tensor{}),
               Error);
}

}  // namespace
}  // namespace megatrain
