// Test helpers for ops: seeded random tensors, naive double-precision references, and a
// finite-difference gradient check of L = Σ out ∘ R (so ∂L/∂out = R).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernels/rng.h"

namespace megatrain::test {

inline std::vector<float> randn(size_t n, uint32_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  RngKey k{42, static_cast<uint32_t>(RngPurpose::test), stream, 0};
  for (size_t i = 0; i < n; ++i) v[i] = rng_normal(k, i) * scale;
  return v;
}

inline void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double atol,
                            double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " at " << i;
  }
}

// Checks analytic gradient `grad` of x against central differences of `loss` (evaluated in
// double from a forward that reads x). Samples up to `samples` coordinates.
inline void check_grad(std::vector<float>& x, const std::vector<float>& grad, const std::function<double()>& loss,
                       const char* what, float eps = 1e-2f, double atol = 2e-3, double rtol = 2e-2,
                       size_t samples = 24) {
  ASSERT_EQ(x.size(), grad.size());
  const size_t stride = std::max<size_t>(1, x.size() / samples);
  for (size_t i = stride / 2; i < x.size(); i += stride) {
    const float orig = x[i];
    x[i] = orig + eps;
    const double lp = loss();
    x[i] = orig - eps;
    const double lm = loss();
    x[i] = orig;
    const double fd = (lp - lm) / (2.0 * eps);
    EXPECT_NEAR(grad[i], fd, atol + rtol * std::fabs(fd)) << what << " coordinate " << i;
  }
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace megatrain::test
