// kernels/cuda/embedding.cu under the host SIMT emulation against the CPU ops. The token embedding
// of a vocabulary shard: tokens below, inside and above the shard, repeated tokens (so a row adds
// several gradients, in token order) — forward and backward bitwise the CPU's. Learned positions
// with first_row > 0 and more rows than T (positions wrap), forward and backward bitwise too.
// Widths under a float4, odd (scalar path) and multiples of 4 (float4 path); row counts past the
// emulated grid's 8 blocks and the sort's 256-token tiles (300 tokens: two tiles, and the
// comparisons split into two chunks of the token range).
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/embedding.cu"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::randn;

struct EmbShape {
  int64_t N;
  int C;
};
void PrintTo(const EmbShape& s, std::ostream* os) { *os << "N=" << s.N << " C=" << s.C; }
class SimtEmbedding : public ::testing::TestWithParam<EmbShape> {};

// Tokens of a vocabulary of 40 words; the shard holds words [10, 27). Word 12 is frequent (a long
// run in the sorted order), and both ends of the shard and both neighbours outside it occur.
std::vector<int32_t> tokens_for(int64_t N) {
  std::vector<int32_t> t(static_cast<size_t>(N));
  const RngKey k{3, static_cast<uint32_t>(RngPurpose::test), 1, 0};
  const int32_t edges[] = {9, 10, 26, 27, 12, 12};
  for (int64_t i = 0; i < N; ++i) {
    const uint32_t w = rng_words(k, static_cast<uint64_t>(i))[0];
    t[static_cast<size_t>(i)] = i < 6 ? edges[i] : (w % 4 == 0 ? 12 : static_cast<int32_t>(w % 40));
  }
  return t;
}
constexpr int kV = 17, kVocabBegin = 10;

TEST_P(SimtEmbedding, TokenForwardBackwardAreBitwiseTheCpus) {
  const auto [N, C] = GetParam();
  const size_t n = static_cast<size_t>(N) * C;
  const auto tokens = tokens_for(N);
  const auto wte = randn(static_cast<size_t>(kV) * C, 1), dy = randn(n, 2);
  std::vector<float> y(n, -7.0f), want_y(n);
  gpu::embedding_forward(nullptr, y.data(), tokens.data(), wte.data(), N, kV, C, kVocabBegin);
  cpu::embedding_forward(want_y.data(), tokens.data(), wte.data(), N, kV, C, kVocabBegin);
  EXPECT_EQ(y, want_y) << "forward";

  std::vector<int32_t> scratch(gpu::embedding_backward_scratch_ints(N), 12345);  // garbage to start from
  std::vector<float> dwte = randn(static_cast<size_t>(kV) * C, 3), want_dwte = dwte;  // += onto these
  gpu::embedding_backward(nullptr, dwte.data(), dy.data(), tokens.data(), N, kV, C, kVocabBegin, scratch.data());
  cpu::embedding_backward(want_dwte.data(), dy.data(), tokens.data(), N, kV, C, kVocabBegin);
  EXPECT_EQ(dwte, want_dwte) << "backward: each row sums its tokens' gradients in token order";
}

TEST_P(SimtEmbedding, PositionForwardBackwardAreBitwiseTheCpus) {
  const auto [n, C] = GetParam();
  const size_t m = static_cast<size_t>(n) * C;
  constexpr int T = 7, P = 9;  // wpe has P ≥ T rows; rows past T get no gradient
  const auto wpe = randn(static_cast<size_t>(P) * C, 4), dy = randn(m, 5), x = randn(m, 6);
  for (int64_t first_row : {int64_t{0}, int64_t{5}, int64_t{23}}) {
    std::vector<float> y = x, want_y = x;
    gpu::position_embedding_forward(nullptr, y.data(), wpe.data(), n, C, T, first_row);
    cpu::position_embedding_forward(want_y.data(), wpe.data(), n, C, T, first_row);
    EXPECT_EQ(y, want_y) << "forward, first_row " << first_row;

    std::vector<float> dwpe = randn(static_cast<size_t>(P) * C, 7), want_dwpe = dwpe;
    gpu::position_embedding_backward(nullptr, dwpe.data(), dy.data(), n, C, T, first_row);
    cpu::position_embedding_backward(want_dwpe.data(), dy.data(), n, C, T, first_row);
    EXPECT_EQ(dwpe, want_dwpe) << "backward, first_row " << first_row;
  }
}

TEST(SimtEmbedding, NothingToDoForNoRows) {
  std::vector<float> w(4, 1.0f);
  gpu::embedding_backward(nullptr, w.data(), nullptr, nullptr, 0, 1, 4, 0, nullptr);
  gpu::position_embedding_backward(nullptr, w.data(), nullptr, 0, 4, 1, 0);
  gpu::embedding_forward(nullptr, nullptr, nullptr, w.data(), 0, 1, 4, 0);
  gpu::position_embedding_forward(nullptr, nullptr, w.data(), 0, 4, 1, 0);
  EXPECT_EQ(w, std::vector<float>(4, 1.0f));
}

// Rows: 1, a few (fewer than T), 300 (two 256-token sort tiles, the emulated grid's 8 blocks). Widths: 3, 33 (scalar), 8 and 260 (float4; 260 is more than a warp's float4 groups).
INSTANTIATE_TEST_SUITE_P(Shapes, SimtEmbedding,
                         ::testing::Values(EmbShape{1, 3}, EmbShape{5, 8}, EmbShape{300, 33}, EmbShape{300, 8},
                                           EmbShape{20, 260}),
                         [](const auto& info) { return fmt::format("N{}_C{}", info.param.N, info.param.C); });

}  // namespace
}  // namespace megatrain
