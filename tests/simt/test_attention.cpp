// kernels/cuda/attention.cu under the host SIMT emulation against the CPU ops: causal flash
// attention forward (out and lse) and backward (all of dqkv), with the production tiles and with
// small unequal tiles (so short sequences still cross several tiles, rows of a tile see no key of
// the next one, and a key tile starts inside a query tile), for T = 1, T not a multiple of any
// tile, H = Hkv, grouped-query 4/2 and 4/1, two batches and head dims 8, 24, 64 and odd ones; and
// a rerun that must be bitwise identical. The block form of context parallelism (causal and
// unmasked blocks of unequal lengths on strided views, gradients added) against the CPU block ops.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/attention.cu"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

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
    const auto heads = [&](const float* p, int first) { return packed_heads(p, s.T, s.H, s.Hkv, s.D, first); };
    gpu::forward_with<32, 16>(nullptr, output_rows(out.data(), s.T, s.H, s.D), lse.data(), heads(qkv.data(), 0),
                              heads(qkv.data(), s.H), heads(qkv.data(), s.H + s.Hkv),
                              gpu::Dims{s.B, s.T, s.T, s.H, s.Hkv, s.D, true, s.T, false});
  }
}

void backward(Tiles tiles, std::vector<float>& dqkv, const std::vector<float>& dout, const std::vector<float>& qkv,
              const std::vector<float>& out, const std::vector<float>& lse, const AttnShape& s) {
  std::vector<float> scratch(gpu::attention_backward_scratch_floats(s.B, s.T, s.H));
  if (tiles == Tiles::production) {
    gpu::attention_backward(nullptr, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.H,
                            s.Hkv, s.D, scratch.data());
  } else {
    const auto heads = [&](auto* p, int first) { return packed_heads(p, s.T, s.H, s.Hkv, s.D, first); };
    const float* p = qkv.data();
    float* g = dqkv.data();
    const gpu::Grads grads{heads(g, 0), heads(g, s.H), heads(g, s.H + s.Hkv)};
    const gpu::Inputs in{output_rows(dout.data(), s.T, s.H, s.D), heads(p, 0), heads(p, s.H), heads(p, s.H + s.Hkv),
                         output_rows(out.data(), s.T, s.H, s.D)};
    gpu::backward_with<16, 32, 32, 16>(nullptr, grads, in, lse.data(),
                                       gpu::Dims{s.B, s.T, s.T, s.H, s.Hkv, s.D, true, s.T, false}, scratch.data());
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

// The block form (context parallelism's ring): a block of query rows of one tensor against key and
// value rows of another, causal (the diagonal pair) or unmasked, Tq ≠ Tk, forward and the `+=`
// backward, against the CPU block ops on the same views — with rows starting inside the tensors,
// strides other than the packed ones, and gradients that already hold values.
struct BlockCase {
  int B, Tq, Tk, H, Hkv, D;
  bool causal;
};
class SimtAttentionBlock : public ::testing::TestWithParam<BlockCase> {};

TEST_P(SimtAttentionBlock, ForwardAndAddedGradientsMatchCpu) {
  const BlockCase c = GetParam();
  // Query rows [3, 3 + Tq) of a (B, Tq + 5, (H + 2·Hkv)·D) tensor; keys and values rows [2, 2 + Tk)
  // of a (B, Tk + 4, 2·Hkv·D) one; out and lse rows [3, 3 + Tq) of (B, Tq + 5, H·D) and (B, H, Tq + 5).
  const int Tqa = c.Tq + 5, Tka = c.Tk + 4, qrow = (c.H + 2 * c.Hkv) * c.D, kvrow = 2 * c.Hkv * c.D, orow = c.H * c.D;
  const auto q = randn(static_cast<size_t>(c.B) * Tqa * qrow, 6, 2.0f), kv = randn(static_cast<size_t>(c.B) * Tka * kvrow, 7, 2.0f);
  const auto view = [](auto* p, int64_t ld, int T, int t0) {
    return AttnView<std::remove_pointer_t<decltype(p)>>{p + t0 * ld, ld, ld * T};
  };
  const AttnBlock b{c.B, c.Tq, c.Tk, c.H, c.Hkv, c.D, c.causal, Tqa};
  const auto qv = view(q.data(), qrow, Tqa, 3), kvv = view(kv.data(), kvrow, Tka, 2);
  const AttnView<const float> kview{kvv.data, kvv.ld, kvv.seq}, vview{kvv.data + c.Hkv * c.D, kvv.ld, kvv.seq};
  std::vector<float> out(static_cast<size_t>(c.B) * Tqa * orow, 0.0f), lse(static_cast<size_t>(c.B) * c.H * Tqa, 0.0f);
  std::vector<float> want = out, want_lse = lse;
  cpu::attention_block_forward(view(want.data(), orow, Tqa, 3), want_lse.data() + 3, qv, kview, vview, b);
  gpu::attention_block_forward(nullptr, view(out.data(), orow, Tqa, 3), lse.data() + 3, qv, kview, vview, b);
  expect_matches_cpu(out, want, "out");
  expect_matches_cpu(lse, want_lse, "lse");

  const auto dout = randn(out.size(), 8);
  const auto dq0 = randn(q.size(), 9), dkv0 = randn(kv.size(), 10);  // what the gradients already hold
  std::vector<float> dq = dq0, dkv = dkv0, want_dq = dq0, want_dkv = dkv0;
  const AttnView<const float> doutv = view(dout.data(), orow, Tqa, 3), outv = view(std::as_const(want).data(), orow, Tqa, 3);
  const auto grads = [&](std::vector<float>& gq, std::vector<float>& gkv) {
    const auto k = view(gkv.data(), kvrow, Tka, 2);
    return std::tuple{view(gq.data(), qrow, Tqa, 3), k, AttnView<float>{k.data + c.Hkv * c.D, k.ld, k.seq}};
  };
  const auto [cq, ck, cv] = grads(want_dq, want_dkv);
  cpu::attention_block_backward(cq, ck, cv, doutv, qv, kview, vview, outv, want_lse.data() + 3, b);
  const auto [gq, gk, gv] = grads(dq, dkv);
  std::vector<float> scratch(gpu::attention_block_scratch_floats(b));
  gpu::attention_block_backward(nullptr, gq, gk, gv, doutv, qv, kview, vview, outv, want_lse.data() + 3, b,
                                scratch.data());
  expect_matches_cpu(dq, want_dq, "dq");
  expect_matches_cpu(dkv, want_dkv, "dk, dv");
}

INSTANTIATE_TEST_SUITE_P(Blocks, SimtAttentionBlock,
                         ::testing::Values(BlockCase{1, 21, 21, 2, 2, 8, true}, BlockCase{2, 37, 37, 4, 2, 24, true},
                                           BlockCase{1, 21, 42, 4, 1, 8, false},
                                           BlockCase{2, 70, 35, 2, 2, 16, false}),
                         [](const auto& info) {
                           const BlockCase& c = info.param;
                           return fmt::format("B{}_Tq{}_Tk{}_H{}_Hkv{}_D{}_{}", c.B, c.Tq, c.Tk, c.H, c.Hkv, c.D,
                                              c.causal ? "causal" : "full");
                         });

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
