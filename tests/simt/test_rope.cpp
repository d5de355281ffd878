// kernels/cuda/rope.cu under the host SIMT emulation against the CPU op: forward and backward, at
// pos0 = 0 and > 0 (decoding) and far positions (1000: large angles), grouped-query layouts (the v
// heads untouched, bitwise), head sizes whose half is odd or under 4 (scalar path) or a multiple of
// 4 (float4 path), and a buffer one float off alignment. Both sides use the same float cos/sin
// factors (computed in double, rounded); the rotations may differ by a fused multiply-add, so the
// comparison is expect_matches_cpu's. Forward then backward gives the input back. The scaled
// frequencies of rope_scaling (llama3, yarn with its attention factor) likewise.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/rope.cu"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::expect_matches_cpu;
using test::randn;

struct RopeShape {
  int B, T, H, Hkv, D;
};
void PrintTo(const RopeShape& s, std::ostream* os) {
  *os << "B=" << s.B << " T=" << s.T << " H=" << s.H << " Hkv=" << s.Hkv << " D=" << s.D;
}
class SimtRope : public ::testing::TestWithParam<RopeShape> {};

TEST_P(SimtRope, ForwardAndBackwardMatchCpu) {
  const auto [B, T, H, Hkv, D] = GetParam();
  const int row = (H + 2 * Hkv) * D;
  const size_t n = static_cast<size_t>(B) * T * row;
  for (int pos0 : {0, 3, 1000})
    for (int shift : {0, 1}) {
      const auto x = randn(n + 1, 1, 2.0f);
      std::vector<float> fwd = x, want_fwd = x;
      gpu::rope_forward(nullptr, fwd.data() + shift, B, T, H, Hkv, D, RopeFrequencies{10000.0}, pos0);
      cpu::rope_apply(want_fwd.data() + shift, B, T, H, Hkv, D, RopeFrequencies{10000.0}, false, pos0);
      expect_matches_cpu(fwd, want_fwd, "forward");
      for (size_t r = 0; r < static_cast<size_t>(B) * T; ++r) {  // v heads and the spare float untouched
        const size_t v0 = shift + r * row + static_cast<size_t>(H + Hkv) * D;
        for (size_t i = v0; i < v0 + static_cast<size_t>(Hkv) * D; ++i) ASSERT_EQ(fwd[i], x[i]) << "v at " << i;
      }
      EXPECT_EQ(fwd[shift ? 0 : n], x[shift ? 0 : n]);

      std::vector<float> bwd = x, want_bwd = x;
      gpu::rope_backward(nullptr, bwd.data() + shift, B, T, H, Hkv, D, RopeFrequencies{10000.0}, pos0);
      cpu::rope_apply(want_bwd.data() + shift, B, T, H, Hkv, D, RopeFrequencies{10000.0}, true, pos0);
      expect_matches_cpu(bwd, want_bwd, "backward");

      gpu::rope_backward(nullptr, fwd.data() + shift, B, T, H, Hkv, D, RopeFrequencies{10000.0}, pos0);
      expect_matches_cpu(fwd, x, "backward of forward");
    }
}

// The scaled frequencies (kernels/rope_frequencies.h) and YaRN's attention factor: the GPU
// tabulates them as the CPU does, forward and backward, on the float4 and the scalar path.
TEST(SimtRopeScaled, Llama3AndYarnMatchCpu) {
  RopeFrequencies llama3;
  llama3.scaling = RopeScaling::llama3;
  llama3.factor = 8.0;
  llama3.original_len = 32.0;
  RopeFrequencies yarn;
  yarn.scaling = RopeScaling::yarn;
  yarn.factor = 4.0;
  yarn.ramp_high = 2.0;
  yarn.attention = 1.25f;
  for (const RopeFrequencies& f : {llama3, yarn})
    for (const int D : {16, 6}) {
      const int B = 2, T = 7, H = 2, Hkv = 1, pos0 = 5;
      const auto x = randn(static_cast<size_t>(B) * T * (H + 2 * Hkv) * D, 3, 2.0f);
      std::vector<float> fwd = x, want = x;
      gpu::rope_forward(nullptr, fwd.data(), B, T, H, Hkv, D, f, pos0);
      cpu::rope_apply(want.data(), B, T, H, Hkv, D, f, false, pos0);
      expect_matches_cpu(fwd, want, "scaled forward");
      gpu::rope_backward(nullptr, fwd.data(), B, T, H, Hkv, D, f, pos0);
      cpu::rope_apply(want.data(), B, T, H, Hkv, D, f, true, pos0);
      expect_matches_cpu(fwd, want, "scaled backward");
    }
}

// D = 2 and 6 (half 1 and 3: scalar), 8 and 16 (float4), 32 with Hkv = 1 (one kv head for 4 q
// heads). B·T rows: 1, 10 and 27 (past the emulated grid's 8 blocks).
INSTANTIATE_TEST_SUITE_P(Shapes, SimtRope,
                         ::testing::Values(RopeShape{1, 1, 1, 1, 2}, RopeShape{2, 5, 2, 2, 6}, RopeShape{3, 9, 4, 2, 8},
                                           RopeShape{1, 10, 2, 1, 16}, RopeShape{1, 3, 4, 1, 32}),
                         [](const auto& info) {
                           const auto& s = info.param;
                           return fmt::format("B{}_T{}_H{}_Hkv{}_D{}", s.B, s.T, s.H, s.Hkv, s.D);
                         });

}  // namespace
}  // namespace megatrain
