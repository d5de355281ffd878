// kernels/cuda/attention_block.cu under the host SIMT emulation against the CPU ops: context
// parallelism's merge of two partial attentions by their log-sum-exps — with log-sum-exps near 200
// and 90, where e^200 overflows a float and only the shift by their maximum keeps the merge finite,
// in both orders — on strided views that start inside their tensors; and the row copy, plain and
// accumulating, of a strided window of rows and columns. The kernels compute each value by the CPU
// op's float operations, so both must agree bit for bit.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/attention_block.cu"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::randn;

TEST(SimtAttentionRows, MergeOfLargeLogSumExpsIsTheCpusInBothOrders) {
  // Rows [1, 4) of (B, T, W) tensors whose heads start at column 2 (W = 2 + H·D + 3), lse (B, H, T).
  const int B = 2, T = 5, H = 3, D = 7, W = 2 + H * D + 3, Tq = 3;
  const auto o0 = randn(B * T * W, 61), p0 = randn(B * T * W, 62), noise = randn(B * H * T, 63);
  std::vector<float> la0(B * H * T), lc0(la0.size());
  for (size_t i = 0; i < la0.size(); ++i) la0[i] = 200.0f + noise[i], lc0[i] = (i % 3 ? 90.0f : 200.5f) - noise[i];
  const AttnBlock block{B, Tq, Tq, H, H, D, false, T};
  for (const bool swap : {false, true}) {
    std::vector<float> want = swap ? p0 : o0, got = want, part = swap ? o0 : p0;
    std::vector<float> want_lse = swap ? lc0 : la0, got_lse = want_lse, part_lse = swap ? la0 : lc0;
    const auto view = [&](float* d) { return AttnView<float>{d + W + 2, W, static_cast<int64_t>(T) * W}; };
    const AttnView<const float> pv{part.data() + W + 2, W, static_cast<int64_t>(T) * W};
    cpu::attention_merge(view(want.data()), want_lse.data() + 1, pv, part_lse.data() + 1, block);
    gpu::attention_merge(nullptr, view(got.data()), got_lse.data() + 1, pv, part_lse.data() + 1, block);
    for (float x : want) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(got, want) << (swap ? "swapped" : "");
    EXPECT_EQ(got_lse, want_lse) << (swap ? "swapped" : "");
    EXPECT_NE(want, swap ? p0 : o0) << "the merge changed the rows";
  }
}

TEST(SimtAttentionRows, RowCopyCopiesAndAddsTheCpusWindow) {
  const int B = 3, T = 7, W = 11, n = 4;
  const auto src = randn(B * T * W, 64), start = randn(B * T * W, 65);
  for (const bool accumulate : {false, true}) {
    std::vector<float> want = start, got = start;
    const AttnView<const float> s{src.data() + 2 * W + 1, W, static_cast<int64_t>(T) * W};
    const auto dst = [&](float* d) { return AttnView<float>{d + 1 * W + 4, W, static_cast<int64_t>(T) * W}; };
    cpu::attention_rows_copy(dst(want.data()), s, B, n, 6, accumulate);
    gpu::attention_rows_copy(nullptr, dst(got.data()), s, B, n, 6, accumulate);
    EXPECT_EQ(got, want) << (accumulate ? "accumulate" : "copy");
    EXPECT_NE(want, start);
  }
}

}  // namespace
}  // namespace megatrain
