// Comparing a CUDA kernel run under the host SIMT emulation with the CPU op (the reference, itself
// checked against float64 and finite differences in tests/kernels). Both are float32 with sums in
// different orders; every element of these ops is a sum of at most a few hundred terms no larger
// than the tensor's largest value, so they agree within kFloatRtol (2e-5, op_harness.h) of it.
// A wrong index, a missed row or column, or a lost term is orders of magnitude above that.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/kernels/op_harness.h"

namespace megatrain::test {

inline void expect_matches_cpu(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0.0;
  for (float w : want) largest = std::max(largest, static_cast<double>(std::fabs(w)));
  const double tol = kFloatRtol * std::max(largest, 1e-30);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i << " of " << got.size();
}

}  // namespace megatrain::test
