// Test helpers for ops: seeded random tensors, and two gradient checks whose tolerances are derived,
// not guessed.
//  - Linear ops: against the exact product computed in double. A float32 sum of K products is off
//    by at most γ_K·Σ|terms| (γ_K = K·u/(1 − K·u), u = 2⁻²⁴), so expect_within_rounding allows
//    2·K·u·Σ|terms| per element (the factor 2 for the float32 inputs of a fused backward).
//  - Nonlinear ops: central differences of a float64 reference of the op on EVERY coordinate.
//    fd_grad returns the difference quotient at step h and its truncation error, estimated by
//    Richardson's rule from the quotient at 2h (error(h) ≈ (D(2h) − D(h))/3). expect_grad allows
//    4× that error plus the float32 op's own rounding, kFloatRtol of the largest gradient: every
//    gradient element of these ops is a sum of at most a few hundred float32 terms of the size of
//    the largest one, so its rounding is below 300·u ≈ 2e-5 of it. A relative error such as C/(C−1)
//    in a norm's backward (1.4 % at C = 70) is three orders of magnitude above the tolerance.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/rng.h"

namespace megatrain::test {

inline constexpr double kUnitRoundoff = 5.960464477539063e-08;  // 2⁻²⁴
inline constexpr double kFloatRtol = 2e-5;

inline std::vector<float> randn(size_t n, uint32_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  RngKey k{42, static_cast<uint32_t>(RngPurpose::test), stream, 0};
  for (size_t i = 0; i < n; ++i) v[i] = rng_normal(k, i) * scale;
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double atol,
                            double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " at " << i;
  }
}

// got[i] against the exact want[i], a sum of K products whose absolute values sum to abs_sum[i].
inline void expect_within_rounding(const std::vector<float>& got, const std::vector<double>& want,
                                   const std::vector<double>& abs_sum, int K, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(abs_sum.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2.0 * K * kUnitRoundoff * abs_sum[i] + 1e-30) << what << " at " << i;
}

struct FdGrad {
  std::vector<double> grad;   // central difference quotient at step h
  std::vector<double> error;  // its estimated truncation error
};

// Central differences of LOSS (a float64 reference) at x on every coordinate.
inline FdGrad fd_grad(std::vector<double> x, const std::function<double(const std::vector<double>&)>& loss,
                      double h = 1e-4) {
  FdGrad out{std::vector<double>(x.size()), std::vector<double>(x.size())};
  const auto quotient = [&](size_t i, double step) {
    const double orig = x[i];
    x[i] = orig + step;
    const double lp = loss(x);
    x[i] = orig - step;
    const double lm = loss(x);
    x[i] = orig;
    return (lp - lm) / (2.0 * step);
  };
  for (size_t i = 0; i < x.size(); ++i) {
    out.grad[i] = quotient(i, h);
    out.error[i] = std::fabs(quotient(i, 2.0 * h) - out.grad[i]) / 3.0;
  }
  return out;
}

// The op's float32 gradient against the reference's central differences (tolerance: file comment).
inline void expect_grad(const std::vector<float>& got, const FdGrad& want, const char* what) {
  ASSERT_EQ(got.size(), want.grad.size()) << what;
  double scale = 0.0;
  for (double g : want.grad) scale = std::max(scale, std::fabs(g));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want.grad[i], 4.0 * want.error[i] + kFloatRtol * scale + 1e-12) << what << " coordinate " << i;
}

inline double dot(const std::vector<double>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace megatrain::test
