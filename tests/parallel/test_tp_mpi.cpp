// Tensor-parallel mappings and linear layers on 1, 2 and 4 ranks: each mapping's forward and
// backward against the serial math, and a column-parallel → row-parallel linear pair (Megatron's
// MLP without the activation) against finite differences of its float64 serial loss, with and
// without sequence parallelism.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/linear.h"
#include "parallel/mappings.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {

using test::randn;
const Stream S = Stream::cpu();
constexpr int64_t kN = 8, kC = 6, kF = 8;  // rows, model width, hidden width (divisible by 1, 2, 4)

std::vector<float> rows_of(const std::vector<float>& full, int64_t first, int64_t n, int64_t width) {
  return {full.begin() + first * width, full.begin() + (first + n) * width};
}

class TpMpi : public ::testing::TestWithParam<bool> {
 protected:
  Comm world = Comm::world();
  int r = world.rank(), p = world.size();
  TensorParallel tp{world, TpOptions{GetParam(), true}, kN, kC};
  int64_t n_local = tp.local_rows(), first = tp.first_row();
};

TEST_P(TpMpi, EachMappingAndItsConjugateMatchTheSerialMath) {
  const auto x = randn(kN * kC, 1);
  std::vector<float> full(kN * kC, -1.0f), local = rows_of(x, first, n_local, kC);
  // enter forward: every rank ends with all rows.
  if (!tp.sequence_parallel()) full = local;
  tp.enter_forward(Tensor(full.data(), {kN, kC}), Tensor(tp.sequence_parallel() ? local.data() : full.data(), {n_local, kC}));
  EXPECT_EQ(full, x);
  // leave forward: the sum over ranks of partials (r + 1)·x, this rank's rows of it.
  std::vector<float> partial(x);
  for (float& v : partial) v *= static_cast<float>(r + 1);
  std::vector<float> out(static_cast<size_t>(n_local * kC));
  Tensor out_t = tp.sequence_parallel() ? Tensor(out.data(), {n_local, kC}) : Tensor(partial.data(), {kN, kC});
  tp.leave_forward(out_t, Tensor(partial.data(), {kN, kC}));
  const float factor = static_cast<float>(p * (p + 1) / 2);
  // A sum of p float products: p roundings of at most u relative each.
  const auto near = [&](float got, float want) { return std::fabs(got - want) <= p * 6e-8 * std::fabs(want); };
  for (int64_t i = 0; i < n_local * kC; ++i) ASSERT_TRUE(near(out_t.f32()[i], x[first * kC + i] * factor)) << i;
  // enter backward (conjugate of enter): the same sum, asynchronously.
  std::vector<float> dfull(x), dlocal(static_cast<size_t>(n_local * kC));
  for (float& v : dfull) v *= static_cast<float>(r + 1);
  Tensor dl = tp.sequence_parallel() ? Tensor(dlocal.data(), {n_local, kC}) : Tensor(dfull.data(), {kN, kC});
  tp.enter_backward(dl, Tensor(dfull.data(), {kN, kC})).wait();
  for (int64_t i = 0; i < n_local * kC; ++i) ASSERT_TRUE(near(dl.f32()[i], x[first * kC + i] * factor)) << i;
  // leave backward (conjugate of leave): every rank ends with all rows of the gradient.
  std::vector<float> g(kN * kC, -1.0f), gl = rows_of(x, first, n_local, kC);
  if (!tp.sequence_parallel()) g = gl;
  tp.leave_backward(Tensor(g.data(), {kN, kC}), Tensor(tp.sequence_parallel() ? gl.data() : g.data(), {n_local, kC}));
  EXPECT_EQ(g, x);
}

// Z = (X·W1ᵀ + b1)·W2ᵀ + b2 with W1, b1 split by rows (column-parallel) and W2 by columns
// (row-parallel); loss = Σ R ⊙ Z. Forward rows and every gradient slice against the serial float64
// model's values and central differences.
TEST_P(TpMpi, ColumnThenRowParallelPairMatchesFiniteDifferences) {
  const int64_t Fl = kF / p;
  auto X = randn(kN * kC, 2), W1 = randn(kF * kC, 3, 0.5f), b1 = randn(kF, 4), W2 = randn(kC * kF, 5, 0.5f),
             b2 = randn(kC, 6), R = randn(kN * kC, 7);
  // Serial float64 loss of the concatenated parameters [X | W1 | b1 | W2 | b2].
  std::vector<double> all;
  for (const auto* v : {&X, &W1, &b1, &W2, &b2}) all.insert(all.end(), v->begin(), v->end());
  const int64_t oX = 0, oW1 = oX + kN * kC, ob1 = oW1 + kF * kC, oW2 = ob1 + kF, ob2 = oW2 + kC * kF;
  auto serial_z = [&](const std::vector<double>& a) {
    std::vector<double> h(kN * kF), z(kN * kC);
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t f = 0; f < kF; ++f) {
        double s = a[ob1 + f];
        for (int64_t c = 0; c < kC; ++c) s += a[oX + n * kC + c] * a[oW1 + f * kC + c];
        h[n * kF + f] = s;
      }
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t c = 0; c < kC; ++c) {
        double s = a[ob2 + c];
        for (int64_t f = 0; f < kF; ++f) s += h[n * kF + f] * a[oW2 + c * kF + f];
        z[n * kC + c] = s;
      }
    return z;
  };
  const auto loss = [&](const std::vector<double>& a) { return test::dot(serial_z(a), R); };
  const test::FdGrad fd = test::fd_grad(all, loss);
  const std::vector<double> z_want = serial_z(all);

  // This rank's slices.
  std::vector<float> w1(W1.begin() + r * Fl * kC, W1.begin() + (r + 1) * Fl * kC), bb1(b1.begin() + r * Fl, b1.begin() + (r + 1) * Fl);
  std::vector<float> w2(kC * Fl);
  for (int64_t c = 0; c < kC; ++c)
    for (int64_t f = 0; f < Fl; ++f) w2[c * Fl + f] = W2[c * kF + r * Fl + f];
  std::vector<float> x_local = rows_of(X, first, n_local, kC), x_full(kN * kC), h(kN * Fl), z_partial(kN * kC);
  std::vector<float> z_local(n_local * kC);
  const bool sp = tp.sequence_parallel();
  if (!sp) x_full = x_local;
  const Tensor xf(x_full.data(), {kN, kC}), xl(sp ? x_local.data() : x_full.data(), {n_local, kC});
  tp.enter_forward(xf, xl);
  column_parallel_forward(S, Tensor(h.data(), {kN, Fl}), xf, Tensor(w1.data(), {Fl, kC}), Tensor(bb1.data(), {Fl}));
  const Tensor zl(sp ? z_local.data() : z_partial.data(), {n_local, kC});
  row_parallel_forward(S, tp, zl, Tensor(z_partial.data(), {kN, kC}), Tensor(h.data(), {kN, Fl}),
                       Tensor(w2.data(), {kC, Fl}), Tensor(b2.data(), {kC}));
  for (int64_t i = 0; i < n_local * kC; ++i) ASSERT_NEAR(zl.f32()[i], z_want[first * kC + i], 1e-5) << i;

  // Backward from dZ = R (this rank's rows).
  std::vector<float> dz_local = rows_of(R, first, n_local, kC), dz_full(kN * kC), dh(kN * Fl);
  std::vector<float> dw1(Fl * kC, 0.0f), db1(Fl, 0.0f), dw2(kC * Fl, 0.0f), db2(kC, 0.0f);
  std::vector<float> dx_local(n_local * kC), dx_full(kN * kC);
  if (!sp) dz_full = dz_local;
  const Tensor dzl(sp ? dz_local.data() : dz_full.data(), {n_local, kC});
  row_parallel_backward(S, tp, Tensor(dh.data(), {kN, Fl}), Tensor(dw2.data(), {kC, Fl}), Tensor(db2.data(), {kC}),
                        Tensor(dz_full.data(), {kN, kC}), dzl, Tensor(h.data(), {kN, Fl}), Tensor(w2.data(), {kC, Fl}));
  const Tensor dxl(sp ? dx_local.data() : dx_full.data(), {n_local, kC});
  column_parallel_backward(S, tp, dxl, Tensor(dx_full.data(), {kN, kC}), Tensor(dw1.data(), {Fl, kC}),
                           Tensor(db1.data(), {Fl}), Tensor(dh.data(), {kN, Fl}), xf, Tensor(w1.data(), {Fl, kC}));

  // The finite differences of this rank's slices.
  auto pick = [&](std::vector<int64_t> idx) {
    test::FdGrad s;
    for (int64_t i : idx) {
      s.grad.push_back(fd.grad[static_cast<size_t>(i)]);
      s.error.push_back(fd.error[static_cast<size_t>(i)]);
    }
    return s;
  };
  std::vector<int64_t> ix, iw1, ib1, iw2, ib2;
  for (int64_t i = 0; i < n_local * kC; ++i) ix.push_back(oX + first * kC + i);
  for (int64_t i = 0; i < Fl * kC; ++i) iw1.push_back(oW1 + r * Fl * kC + i);
  for (int64_t i = 0; i < Fl; ++i) ib1.push_back(ob1 + r * Fl + i);
  for (int64_t c = 0; c < kC; ++c)
    for (int64_t f = 0; f < Fl; ++f) iw2.push_back(oW2 + c * kF + r * Fl + f);
  for (int64_t c = 0; c < kC; ++c) ib2.push_back(ob2 + c);
  test::expect_grad(std::vector<float>(dxl.f32(), dxl.f32() + n_local * kC), pick(ix), "dX");
  test::expect_grad(dw1, pick(iw1), "dW1");
  test::expect_grad(db1, pick(ib1), "db1");
  test::expect_grad(dw2, pick(iw2), "dW2");
  test::expect_grad(db2, pick(ib2), "db2 (every rank: replicated)");
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, TpMpi, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "on" : "off"; });

}  // namespace
}  // namespace megatrain
