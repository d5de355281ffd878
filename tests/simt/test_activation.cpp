// kernels/cuda/activation.cu under the host SIMT emulation against the CPU ops: GELU and SwiGLU
// forward and backward, and GELU with the bias fused in against the CPU's bias add then GELU, its
// bias gradient against the column sums of the CPU's input gradient. The GPU uses tanhf and expf
// where the CPU has its own fast_tanh and fast_exp: within expect_matches_cpu's tolerance.
// Sizes: under a float4, odd widths (scalar path), widths a multiple of 4 (float4 path), a pointer
// one float off alignment (scalar path), and a flat size past one sweep of the emulated grid.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/activation.cu"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::expect_matches_cpu;
using test::randn;

TEST(SimtActivation, GeluForwardBackward) {
  for (int64_t n : {1, 7, 1030, 20003})
    for (int shift : {0, 1}) {
      const size_t m = static_cast<size_t>(n) + 1;
      const auto x = randn(m, 1, 3.0f), dy = randn(m, 2);
      std::vector<float> y(m), want_y(m), dx(m), want_dx(m);
      gpu::gelu_forward(nullptr, y.data() + shift, x.data() + shift, n);
      cpu::gelu_forward(want_y.data() + shift, x.data() + shift, n);
      expect_matches_cpu(y, want_y, "gelu");
      gpu::gelu_backward(nullptr, dx.data() + shift, dy.data() + shift, x.data() + shift, n);
      cpu::gelu_backward(want_dx.data() + shift, dy.data() + shift, x.data() + shift, n);
      expect_matches_cpu(dx, want_dx, "gelu dinp");
    }
}

struct RowShape {
  int64_t N;
  int C;
};
void PrintTo(const RowShape& s, std::ostream* os) { *os << "N=" << s.N << " C=" << s.C; }
class SimtRows : public ::testing::TestWithParam<RowShape> {};

TEST_P(SimtRows, BiasGeluMatchesBiasAddThenGelu) {
  const auto [N, OC] = GetParam();
  const size_t n = static_cast<size_t>(N) * OC;
  const auto x = randn(n, 3, 2.0f), bias = randn(static_cast<size_t>(OC), 4), dy = randn(n, 5);
  std::vector<float> pre(n);
  for (size_t i = 0; i < n; ++i) pre[i] = x[i] + bias[i % static_cast<size_t>(OC)];
  std::vector<float> y(n), want_y(n);
  gpu::bias_gelu_forward(nullptr, y.data(), x.data(), bias.data(), N, OC);
  cpu::gelu_forward(want_y.data(), pre.data(), static_cast<int64_t>(n));
  expect_matches_cpu(y, want_y, "bias gelu");

  // dbias accumulates (+=) onto what is there; dinp = dout in place works too.
  std::vector<float> scratch(gpu::bias_gelu_backward_scratch_floats(N, OC));
  std::vector<float> dx(n), db = randn(static_cast<size_t>(OC), 6), want_dx(n), want_db = db;
  gpu::bias_gelu_backward(nullptr, dx.data(), db.data(), dy.data(), x.data(), bias.data(), N, OC, scratch.data());
  cpu::gelu_backward(want_dx.data(), dy.data(), pre.data(), static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i) want_db[i % static_cast<size_t>(OC)] += want_dx[i];
  expect_matches_cpu(dx, want_dx, "bias gelu dinp");
  expect_matches_cpu(db, want_db, "dbias");
  std::vector<float> inplace = dy;
  gpu::bias_gelu_backward(nullptr, inplace.data(), nullptr, inplace.data(), x.data(), bias.data(), N, OC,
                          scratch.data());
  EXPECT_EQ(inplace, dx) << "in place, without dbias";
}

TEST_P(SimtRows, SwigluForwardBackward) {
  const auto [N, F] = GetParam();
  const size_t n = static_cast<size_t>(N) * F;
  const auto x = randn(2 * n, 7, 2.0f), dy = randn(n, 8);
  std::vector<float> y(n), want_y(n), dx(2 * n), want_dx(2 * n);
  gpu::swiglu_forward(nullptr, y.data(), x.data(), N, F);
  cpu::swiglu_forward(want_y.data(), x.data(), N, F);
  expect_matches_cpu(y, want_y, "swiglu");
  gpu::swiglu_backward(nullptr, dx.data(), dy.data(), x.data(), N, F);
  cpu::swiglu_backward(want_dx.data(), dy.data(), x.data(), N, F);
  expect_matches_cpu(dx, want_dx, "swiglu dinp");
}

// Widths: 1, 3 (under a float4), 33 (odd), 36 and 1028 (float4 rows, the latter more than one pass
// of a 256-thread block). Rows: one, a few, and 300 (past the emulated grid's 8 blocks, and two
// row chunks for the bias gradient's column sums).
INSTANTIATE_TEST_SUITE_P(Shapes, SimtRows,
                         ::testing::Values(RowShape{1, 1}, RowShape{5, 3}, RowShape{13, 33}, RowShape{300, 36},
                                           RowShape{3, 1028}),
                         [](const auto& info) { return fmt::format("N{}_C{}", info.param.N, info.param.C); });

}  // namespace
}  // namespace megatrain
