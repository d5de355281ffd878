// kernels/cuda/cross_entropy.cu under the host SIMT emulation: the three vocabulary-parallel steps
// against the CPU ops (with and without the in-place gradient, targets on and off the shard and in
// the padding), the fused one-pass kernel against the CPU steps, and the steps run on two vocabulary
// shards (combined on the host as the trainer combines them over tensor parallelism) against the
// fused kernel on the whole vocabulary.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/cross_entropy.cu"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::expect_matches_cpu;
using test::randn;

struct CeShape {
  int64_t N;
  int V, valid, vocab_begin;  // this shard: columns [vocab_begin, vocab_begin + valid) of the vocabulary
};
void PrintTo(const CeShape& s, std::ostream* os) {
  *os << "N=" << s.N << " V=" << s.V << " valid=" << s.valid << " begin=" << s.vocab_begin;
}
class SimtCrossEntropy : public ::testing::TestWithParam<CeShape> {};

// Targets over the whole vocabulary [0, vocab): on this shard, before it, after it (the padding
// columns of the last shard included).
std::vector<int32_t> targets_for(int64_t N, int vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(N));
  uint32_t x = seed;
  for (auto& v : t) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  return t;
}

TEST_P(SimtCrossEntropy, ThreeStepsMatchCpu) {
  const auto [N, V, valid, begin] = GetParam();
  const size_t n = static_cast<size_t>(N) * V;
  const auto logits = randn(n, 1, 3.0f);
  const auto targets = targets_for(N, begin + V + 3, 7);
  for (bool in_place : {false, true}) {
    std::vector<float> x = logits, want_x = logits;
    std::vector<float> mx(N), sum(N), tl(N), loss(N), want_mx(N), want_sum(N), want_tl(N), want_loss(N);
    gpu::cross_entropy_max(nullptr, mx.data(), x.data(), N, V, valid);
    cpu::cross_entropy_max(want_mx.data(), want_x.data(), N, V, valid);
    EXPECT_EQ(mx, want_mx) << "a maximum is exact";
    gpu::cross_entropy_sums(nullptr, sum.data(), tl.data(), x.data(), mx.data(), targets.data(), N, V, valid, begin,
                            in_place);
    cpu::cross_entropy_sums(want_sum.data(), want_tl.data(), want_x.data(), want_mx.data(), targets.data(), N, V,
                            valid, begin, in_place);
    expect_matches_cpu(sum, want_sum, "sum_exp");
    EXPECT_EQ(tl, want_tl) << "the target logit is a copy";
    gpu::cross_entropy_finish(nullptr, loss.data(), in_place ? x.data() : nullptr, mx.data(), sum.data(), tl.data(),
                              targets.data(), N, V, valid, begin, 0.25f);
    cpu::cross_entropy_finish(want_loss.data(), in_place ? want_x.data() : nullptr, want_mx.data(), want_sum.data(),
                              want_tl.data(), targets.data(), N, V, valid, begin, 0.25f);
    expect_matches_cpu(loss, want_loss, "losses");
    expect_matches_cpu(x, want_x, in_place ? "dlogits" : "logits untouched");
  }
}

// The fused kernel sees the whole vocabulary: the shape's columns from 0, padding past valid.
TEST_P(SimtCrossEntropy, FusedMatchesCpuSteps) {
  const auto [N, V, valid, begin] = GetParam();
  const size_t n = static_cast<size_t>(N) * V;
  const auto logits = randn(n, 2, 3.0f);
  const auto targets = targets_for(N, V, 11);  // some land in the padding: target logit 0
  for (bool grad : {false, true}) {
    std::vector<float> x = logits, want_x = logits, loss(N), mx(N), sum(N), tl(N), want_loss(N);
    gpu::cross_entropy_fused(nullptr, loss.data(), x.data(), targets.data(), N, V, valid, 0.5f, grad);
    cpu::cross_entropy_max(mx.data(), want_x.data(), N, V, valid);
    cpu::cross_entropy_sums(sum.data(), tl.data(), want_x.data(), mx.data(), targets.data(), N, V, valid, 0, grad);
    cpu::cross_entropy_finish(want_loss.data(), grad ? want_x.data() : nullptr, mx.data(), sum.data(), tl.data(),
                              targets.data(), N, V, valid, 0, 0.5f);
    expect_matches_cpu(loss, want_loss, "losses");
    expect_matches_cpu(x, want_x, grad ? "dlogits" : "logits untouched");
  }
}

// Two shards of V columns each (the second holding the padding), the maxima and sums combined on
// the host between the steps, against the fused kernel on the 2V columns.
TEST_P(SimtCrossEntropy, TwoShardsMatchFused) {
  const auto [N, V, valid, begin] = GetParam();
  const int full = 2 * V, full_valid = V + valid;
  const auto logits = randn(static_cast<size_t>(N) * full, 3, 3.0f);
  const auto targets = targets_for(N, full, 13);
  std::vector<float> fused = logits, fused_loss(N);
  gpu::cross_entropy_fused(nullptr, fused_loss.data(), fused.data(), targets.data(), N, full, full_valid, 0.125f, true);

  std::vector<std::vector<float>> shard(2, std::vector<float>(static_cast<size_t>(N) * V));
  for (int64_t i = 0; i < N; ++i)
    for (int s = 0; s < 2; ++s)
      std::copy_n(logits.begin() + i * full + s * V, V, shard[s].begin() + i * V);
  const int shard_valid[2] = {V, valid};
  std::vector<float> mx(N, -INFINITY), sum(N), tl(N), part(N), part2(N), loss(N);
  for (int s = 0; s < 2; ++s) {
    gpu::cross_entropy_max(nullptr, part.data(), shard[s].data(), N, V, shard_valid[s]);
    for (int64_t i = 0; i < N; ++i) mx[i] = std::max(mx[i], part[i]);
  }
  for (int s = 0; s < 2; ++s) {
    gpu::cross_entropy_sums(nullptr, part.data(), part2.data(), shard[s].data(), mx.data(), targets.data(), N, V,
                            shard_valid[s], s * V, true);
    for (int64_t i = 0; i < N; ++i) {
      sum[i] += part[i];
      tl[i] += part2[i];
    }
  }
  for (int s = 0; s < 2; ++s) {
    gpu::cross_entropy_finish(nullptr, loss.data(), shard[s].data(), mx.data(), sum.data(), tl.data(), targets.data(),
                              N, V, shard_valid[s], s * V, 0.125f);
    std::vector<float> got(static_cast<size_t>(N) * V), want(got.size());
    for (int64_t i = 0; i < N; ++i) {
      std::copy_n(shard[s].begin() + i * V, V, got.begin() + i * V);
      std::copy_n(fused.begin() + i * full + s * V, V, want.begin() + i * V);
    }
    expect_matches_cpu(got, want, s == 0 ? "dlogits of shard 0" : "dlogits of shard 1");
  }
  expect_matches_cpu(loss, fused_loss, "losses");
}

TEST(SimtCrossEntropyEmpty, NoRowsLaunchesNothing) {
  gpu::cross_entropy_max(nullptr, nullptr, nullptr, 0, 10, 10);
  gpu::cross_entropy_sums(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 10, 10, 0, true);
  gpu::cross_entropy_finish(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 10, 10, 0, 1.0f);
  gpu::cross_entropy_fused(nullptr, nullptr, nullptr, nullptr, 0, 10, 10, 1.0f, true);
}

// Rows: one, several. Vocabularies: under a warp, past one block of 256 threads with a partial
// warp of valid columns, several strides of the block, all valid or with padding.
INSTANTIATE_TEST_SUITE_P(Shapes, SimtCrossEntropy,
                         ::testing::Values(CeShape{1, 7, 7, 0}, CeShape{3, 300, 291, 0}, CeShape{4, 700, 613, 50},
                                           CeShape{2, 257, 257, 300}),
                         [](const auto& info) {
                           return fmt::format("N{}_V{}_valid{}_begin{}", info.param.N, info.param.V,
                                              info.param.valid, info.param.vocab_begin);
                         });

}  // namespace
}  // namespace megatrain
