// kernels/cuda/attention.cu under the host SIMT emulation against the CPU ops: causal flash
// attention forward (out and lse) and backward (all of dqkv), with the production tiles and with
// small unequal tiles (so short sequences still cross several tiles, rows of a tile see no key of
// the next one, and a key tile starts inside a query tile), for T = 1, T not a multiple of any
// tile, H = Hkv, grouped-query 4/2 and 4/1, two batches and head dims 8, 24, 64 and odd ones; and
// a rerun that must be bitwise identical.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/attention.cu"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>

#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::expect_matches_cpu;
using test::randn;

// Which tiles a run uses: the launchers' own (production) or small ones, forward 32 × 16, dK/dV
// 16 query rows × 32 keys, dQ 32 × 16.
enum class Tiles { production, small };

struct AttnShape {
  int B, T, H, Hkv, D;
};
void PrintTo(const AttnShape& s, std::ostream* os) {
  *os << "B=" << s.B << " T=" << s.T << " H=" << s.H << " Hkv=" << s.Hkv << " D=" << s.D;
}

cpu::AttnDims dims(const AttnShape& s) { return {s.B, s.T, s.H, s.Hkv, s.D}; }
size_t qkv_size(const AttnShape& s) { return static_cast<size_t>(s.B) * s.T * (s.H + 2 * s.Hkv) * s.D; }
size_t out_size(const AttnShape& s) { return static_cast<size_t>(s.B) * s.T * s.H * s.D; }
size_t lse_size(const AttnShape& s) { return static_cast<size_t>(s.B) * s.H * s.T; }

void forward(Tiles tiles, std::vector<float>& out, std::vector<float>& lse, const std::vector<float>& qkv,
             const AttnShape& s) {
  if (tiles == Tiles::production) {
    gpu::attention_forward(nullptr, out.data(), lse.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D);
  } else {
    gpu::forward_with<32, 16>(nullptr, out.data(), lse.data(), qkv.data(), gpu::Dims{s.B, s.T, s.H, s.Hkv, s.D});
  }
}

void backward(Tiles tiles, std::vector<float>& dqkv, const std::vector<float>& dout, const std::vector<float>& qkv,
              const std::vector<float>& out, const std::vector<float>& lse, const AttnShape& s) {
  std::vector<float> scratch(gpu::attention_backward_scratch_floats(s.B, s.T, s.H));
  if (tiles == Tiles::production) {
    gpu::attention_backward(nullptr, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.H,
                            s.Hkv, s.D, scratch.data());
  } else {
    gpu::backward_with<16, 32, 32, 16>(nullptr, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                       gpu::Dims{s.B, s.T, s.H, s.Hkv, s.D}, scratch.data());
  }
}

class SimtAttention : public ::testing::TestWithParam<AttnShape> {};

TEST_P(SimtAttention, ForwardMatchesCpu) {
  const AttnShape s = GetParam();
  const auto qkv = randn(qkv_size(s), 1, 2.0f);  // scores spread enough for the softmax to matter
  std::vector<float> want(out_size(s)), want_lse(lse_size(s));
  cpu::attention_forward(want.data(), want_lse.data(), qkv.data(), dims(s));
  for (Tiles tiles : {Tiles::production, Tiles::small}) {
    SCOPED_TRACE(tiles == Tiles::production ? "production tiles" : "small tiles");
    std::vector<float> out(out_size(s), std::numeric_limits<float>::quiet_NaN()), lse(lse_size(s), -1.0f);
    forward(tiles, out, lse, qkv, s);
    expect_matches_cpu(out, want, "out");
    expect_matches_cpu(lse, want_lse, "lse");
  }
}

TEST_P(SimtAttention, BackwardMatchesCpu) {
  const AttnShape s = GetParam();
  const auto qkv = randn(qkv_size(s), 2, 2.0f), dout = randn(out_size(s), 3);
  std::vector<float> out(out_size(s)), lse(lse_size(s)), want(qkv_size(s));
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), dims(s));
  cpu::attention_backward(want.data(), dout.data(), qkv.data(), out.data(), lse.data(), dims(s));
  for (Tiles tiles : {Tiles::production, Tiles::small}) {
    SCOPED_TRACE(tiles == Tiles::production ? "production tiles" : "small tiles");
    // NaN where nothing is written: the backward must assign every element of dqkv.
    std::vector<float> dqkv(qkv_size(s), std::numeric_limits<float>::quiet_NaN());
    backward(tiles, dqkv, dout, qkv, out, lse, s);
    expect_matches_cpu(dqkv, want, "dqkv");
  }
}

// Shapes: a single token; T off every tile size with H = Hkv; grouped-query 4/2 over two batches;
// 4/1 across several key tiles of a group; odd head dims, and the largest (128).
INSTANTIATE_TEST_SUITE_P(Shapes, SimtAttention,
                         ::testing::Values(AttnShape{1, 1, 1, 1, 8}, AttnShape{1, 37, 2, 2, 24},
                                           AttnShape{2, 21, 4, 2, 64}, AttnShape{1, 70, 4, 1, 8},
                                           AttnShape{1, 19, 2, 1, 13}, AttnShape{1, 66, 1, 1, 100},
                                           AttnShape{1, 9, 2, 2, 128}),
                         [](const auto& info) {
                           const AttnShape& s = info.param;
                           return fmt::format("B{}_T{}_H{}_Hkv{}_D{}", s.B, s.T, s.H, s.Hkv, s.D);
                         });

TEST(SimtAttentionRerun, BitwiseIdentical) {
  const AttnShape s{2, 45, 4, 2, 24};
  const auto qkv = randn(qkv_size(s), 4, 2.0f), dout = randn(out_size(s), 5);
  std::vector<float> out(out_size(s)), lse(lse_size(s)), dqkv(qkv_size(s));
  forward(Tiles::production, out, lse, qkv, s);
  backward(Tiles::production, dqkv, dout, qkv, out, lse, s);
  std::vector<float> out2(out_size(s)), lse2(lse_size(s)), dqkv2(qkv_size(s));
  forward(Tiles::production, out2, lse2, qkv, s);
  backward(Tiles::production, dqkv2, dout, qkv, out2, lse2, s);
  EXPECT_EQ(0, std::memcmp(out.data(), out2.data(), out.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(lse.data(), lse2.data(), lse.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dqkv.data(), dqkv2.data(), dqkv.size() * sizeof(float)));
}

TEST(SimtAttentionLimits, HeadDimAndGroupsAndEmptyBatch) {
  EXPECT_TRUE(gpu::attention_can_run(4, 2, 128));
  EXPECT_TRUE(gpu::attention_can_run(4, 1, 1));
  EXPECT_FALSE(gpu::attention_can_run(4, 2, 129));
  EXPECT_FALSE(gpu::attention_can_run(4, 3, 64));
  EXPECT_THROW(gpu::attention_forward(nullptr, nullptr, nullptr, nullptr, 1, 4, 2, 2, 256), std::invalid_argument);
  // B·T = 0 launches nothing (an empty grid would be an error).
  gpu::attention_forward(nullptr, nullptr, nullptr, nullptr, 0, 8, 2, 2, 64);
  gpu::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 2, 0, 2, 2, 64, nullptr);
}

}  // namespace
}  // namespace megatrain
