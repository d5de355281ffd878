// kernels/cuda/adamw.cu under the host SIMT emulation: one multi-tensor update of a list of ranges
// of odd sizes (an empty one, a tail past a whole chunk, one under a warp) against cpu::adamw_update
// on each range, at the first step (the largest bias correction) and a later one with weight decay
// and a clipping scale; and a list longer than one launch holds.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/adamw.cu"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::expect_matches_cpu;
using test::randn;

struct State {
  std::vector<float> p, g, m, v;
};
State state(size_t n, uint32_t seed) {
  State s{randn(n, seed), randn(n, seed + 1), randn(n, seed + 2, 0.1f), randn(n, seed + 3)};
  for (auto& x : s.v) x = x * x;  // a second moment is ≥ 0
  return s;
}

AdamWStep step(int t, float weight_decay, float grad_scale) {
  const float b1 = 0.9f, b2 = 0.95f;
  return AdamWStep{3e-3f,
                   b1,
                   b2,
                   1e-8f,
                   weight_decay,
                   1.0f - std::pow(b1, static_cast<float>(t)),
                   1.0f - std::pow(b2, static_cast<float>(t)),
                   grad_scale};
}

// Updates every range in one call and each range alone on the CPU; compares all four arrays.
void check_list(const std::vector<size_t>& sizes, const AdamWStep& st) {
  std::vector<State> got, want;
  for (size_t i = 0; i < sizes.size(); ++i) {
    got.push_back(state(sizes[i], static_cast<uint32_t>(10 * i)));
    want.push_back(got.back());
  }
  std::vector<gpu::AdamWRange> ranges;
  for (auto& s : got)
    ranges.push_back({s.p.data(), s.g.data(), s.m.data(), s.v.data(), static_cast<int64_t>(s.p.size())});
  gpu::adamw_update(nullptr, ranges.data(), static_cast<int>(ranges.size()), st);
  for (size_t i = 0; i < sizes.size(); ++i) {
    State& w = want[i];
    cpu::adamw_update(w.p.data(), w.g.data(), w.m.data(), w.v.data(), static_cast<int64_t>(w.p.size()), st);
    SCOPED_TRACE(::testing::Message() << "range " << i << " of " << sizes[i]);
    expect_matches_cpu(got[i].p, w.p, "param");
    expect_matches_cpu(got[i].m, w.m, "m");
    expect_matches_cpu(got[i].v, w.v, "v");
    EXPECT_EQ(got[i].g, w.g) << "the gradient is read only";
  }
}

TEST(SimtAdamW, OddRangesFirstStep) {
  // A chunk is 4096 elements: 4096 + 37 leaves a 37-element tail block; 0 owns no block.
  check_list({1000, 0, 4133, 5, 31, 257}, step(1, 0.0f, 1.0f));
}

TEST(SimtAdamW, OddRangesLaterStepWithDecayAndClipping) {
  check_list({0, 33, 8192, 4097, 1}, step(7, 0.1f, 0.4f));
}

TEST(SimtAdamW, ListLongerThanOneLaunch) {
  std::vector<size_t> sizes;
  for (int i = 0; i < 100; ++i) sizes.push_back(static_cast<size_t>(i % 7 == 3 ? 0 : 1 + (i * 37) % 90));
  check_list(sizes, step(3, 0.01f, 1.0f));
}

TEST(SimtAdamW, EmptyListDoesNothing) { check_list({}, step(1, 0.0f, 1.0f)); }

}  // namespace
}  // namespace megatrain
