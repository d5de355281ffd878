// kernels/cuda/sdpa_layout.h: attention computed naively (in double) through the strided views
// that cuDNN's fused attention is given — q, k, v read from the packed qkv, o written into the
// packed out, the log-sum-exp statistics into lse — equals the CPU attention op's out and lse, for
// grouped-query and plain heads. A view with a wrong stride or offset reads other heads or tokens
// and fails this.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/sdpa_layout.h"
#include "kernels/ops.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {

struct Shape4 {
  int B, T, H, Hkv, D;
};

TEST(SdpaLayout, AttentionThroughTheViewsIsTheCpuOps) {
  for (const Shape4 c : {Shape4{2, 9, 4, 2, 8}, Shape4{1, 7, 3, 3, 4}, Shape4{2, 5, 6, 1, 8}}) {
    const auto [B, T, H, Hkv, D] = c;
    const int row = (H + 2 * Hkv) * D;
    const std::vector<float> qkv = test::randn(static_cast<size_t>(B) * T * row, 90);
    std::vector<float> out(static_cast<size_t>(B) * T * H * D), lse(static_cast<size_t>(B) * H * T);
    attention_forward(Stream::cpu(), Tensor(out.data(), {B, T, H * D}), Tensor(lse.data(), {B, H, T}),
                      Tensor(const_cast<float*>(qkv.data()), {B, T, row}), H, Hkv);
    const cuda::SdpaLayout l = cuda::sdpa_layout(B, T, H, Hkv, D);
    EXPECT_EQ(l.q.dims, (std::array<int64_t, 4>{B, H, T, D}));
    EXPECT_EQ(l.k.dims, (std::array<int64_t, 4>{B, Hkv, T, D}));
    std::vector<double> want_out(out.size(), 0.0), want_lse(lse.size(), 0.0);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / Hkv);  // the kv head of query head h, as cuDNN groups them
        for (int i = 0; i < T; ++i) {
          std::vector<double> s(static_cast<size_t>(i) + 1);
          double mx = -1e300;
          for (int j = 0; j <= i; ++j) {
            double acc = 0.0;
            for (int d = 0; d < D; ++d)
              acc += static_cast<double>(qkv[static_cast<size_t>(l.q.at(b, h, i, d))]) *
                     qkv[static_cast<size_t>(l.k.at(b, g, j, d))];
            s[static_cast<size_t>(j)] = acc / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, s[static_cast<size_t>(j)]);
          }
          double sum = 0.0;
          for (double& v : s) sum += (v = std::exp(v - mx));
          want_lse[static_cast<size_t>(l.stats.at(b, h, i, 0))] = mx + std::log(sum);
          for (int j = 0; j <= i; ++j)
            for (int d = 0; d < D; ++d)
              want_out[static_cast<size_t>(l.o.at(b, h, i, d))] +=
                  s[static_cast<size_t>(j)] / sum * qkv[static_cast<size_t>(l.v.at(b, g, j, d))];
        }
      }
    test::expect_near_all(out, want_out, 2e-5, 1e-4, "out through the o view");
    test::expect_near_all(lse, want_lse, 2e-5, 1e-4, "lse through the stats view");
  }
}

}  // namespace
}  // namespace megatrain
