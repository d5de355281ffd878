// kernels/cuda/norm.cu under the host SIMT emulation against the CPU ops: LayerNorm and RMSNorm,
// forward (alone and with the residual add fused in) and backward (with and without the residual
// gradient), at widths below, at and around a warp and rows that leave a block partly empty.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/norm.cu"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::expect_matches_cpu;
using test::randn;

struct NormShape {
  int64_t N;
  int C;
};
void PrintTo(const NormShape& s, std::ostream* os) { *os << "N=" << s.N << " C=" << s.C; }
class SimtNorm : public ::testing::TestWithParam<NormShape> {};

TEST_P(SimtNorm, LayerNormForwardWithAndWithoutResidual) {
  const auto [N, C] = GetParam();
  const size_t n = static_cast<size_t>(N) * C;
  const auto x = randn(n, 1, 2.0f), r = randn(n, 2), w = randn(C, 3), b = randn(C, 4);
  for (bool fused : {false, true}) {
    std::vector<float> sum(n);
    for (size_t i = 0; i < n; ++i) sum[i] = x[i] + r[i];
    const std::vector<float>& normed = fused ? sum : x;
    std::vector<float> out(n), mean(N), rstd(N), want(n), want_mean(N), want_rstd(N), res(n, -1.0f);
    gpu::layernorm_forward(nullptr, out.data(), mean.data(), rstd.data(), res.data(), x.data(),
                           fused ? r.data() : nullptr, w.data(), b.data(), N, C, 1e-5f);
    cpu::layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), normed.data(), w.data(), b.data(), N,
                           C, 1e-5f);
    expect_matches_cpu(out, want, "out");
    expect_matches_cpu(mean, want_mean, "mean");
    expect_matches_cpu(rstd, want_rstd, "rstd");
    if (fused) {
      EXPECT_EQ(res, sum) << "the fused residual sum is an exact float32 addition";
    }
    // Without bias.
    gpu::layernorm_forward(nullptr, out.data(), mean.data(), rstd.data(), res.data(), x.data(),
                           fused ? r.data() : nullptr, w.data(), nullptr, N, C, 1e-5f);
    cpu::layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), normed.data(), w.data(), nullptr, N, C,
                           1e-5f);
    expect_matches_cpu(out, want, "out without bias");
  }
}

TEST_P(SimtNorm, RmsNormForwardWithAndWithoutResidual) {
  const auto [N, C] = GetParam();
  const size_t n = static_cast<size_t>(N) * C;
  const auto x = randn(n, 5, 2.0f), r = randn(n, 6), w = randn(C, 7);
  for (bool fused : {false, true}) {
    std::vector<float> sum(n);
    for (size_t i = 0; i < n; ++i) sum[i] = x[i] + r[i];
    std::vector<float> out(n), rstd(N), want(n), want_rstd(N), res(n, -1.0f);
    gpu::rmsnorm_forward(nullptr, out.data(), rstd.data(), res.data(), x.data(), fused ? r.data() : nullptr,
                         w.data(), N, C, 1e-6f);
    cpu::rmsnorm_forward(want.data(), want_rstd.data(), fused ? sum.data() : x.data(), w.data(), N, C, 1e-6f);
    expect_matches_cpu(out, want, "out");
    expect_matches_cpu(rstd, want_rstd, "rstd");
    if (fused) {
      EXPECT_EQ(res, sum);
    }
  }
}

TEST_P(SimtNorm, LayerNormBackward) {
  const auto [N, C] = GetParam();
  const size_t n = static_cast<size_t>(N) * C;
  const auto x = randn(n, 8, 2.0f), dy = randn(n, 9), dr = randn(n, 10), w = randn(C, 11), b = randn(C, 12);
  std::vector<float> y(n), mean(N), rstd(N);
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  std::vector<float> scratch(gpu::norm_backward_scratch_floats(N, C));
  for (bool with_residual : {false, true}) {
    // Weight and bias gradients accumulate (+=) onto what is there.
    std::vector<float> dx(n), dw = randn(C, 13), db = randn(C, 14), want_dx(n), want_dw = dw, want_db = db;
    gpu::layernorm_backward(nullptr, dx.data(), dw.data(), db.data(), dy.data(), with_residual ? dr.data() : nullptr,
                            x.data(), w.data(), mean.data(), rstd.data(), N, C, scratch.data());
    cpu::layernorm_backward(want_dx.data(), want_dw.data(), want_db.data(), dy.data(),
                            with_residual ? dr.data() : nullptr, x.data(), w.data(), mean.data(), rstd.data(), N, C);
    expect_matches_cpu(dx, want_dx, "dinp");
    expect_matches_cpu(dw, want_dw, "dweight");
    expect_matches_cpu(db, want_db, "dbias");
  }
}

TEST_P(SimtNorm, RmsNormBackward) {
  const auto [N, C] = GetParam();
  const size_t n = static_cast<size_t>(N) * C;
  const auto x = randn(n, 15, 2.0f), dy = randn(n, 16), dr = randn(n, 17), w = randn(C, 18);
  std::vector<float> y(n), rstd(N);
  cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  std::vector<float> scratch(gpu::norm_backward_scratch_floats(N, C));
  for (bool with_residual : {false, true}) {
    std::vector<float> dx(n), dw = randn(C, 19), want_dx(n), want_dw = dw;
    gpu::rmsnorm_backward(nullptr, dx.data(), dw.data(), dy.data(), with_residual ? dr.data() : nullptr, x.data(),
                          w.data(), rstd.data(), N, C, scratch.data());
    cpu::rmsnorm_backward(want_dx.data(), want_dw.data(), dy.data(), with_residual ? dr.data() : nullptr, x.data(),
                          w.data(), rstd.data(), N, C);
    expect_matches_cpu(dx, want_dx, "dinp");
    expect_matches_cpu(dw, want_dw, "dweight");
  }
}

// Widths: under a warp, one lane past it, odd, several warps. Rows: one, a partial block (8 rows a
// block), and enough (300) for the weight gradient's column sums to use two row chunks.
INSTANTIATE_TEST_SUITE_P(Shapes, SimtNorm,
                         ::testing::Values(NormShape{1, 7}, NormShape{5, 32}, NormShape{13, 33}, NormShape{9, 100},
                                           NormShape{300, 70}),
                         [](const auto& info) {
                           return fmt::format("N{}_C{}", info.param.N, info.param.C);
                         });

}  // namespace
}  // namespace megatrain
