// Gradient compression (optim/compress/grad_compression.h) on 1, 2 and 4 ranks, against references
// computed here from every rank's gradients (each rank can make every rank's: they are seeded by
// rank):
//  - onebit: the result equals, exactly, the sum in rank order of each rank's block scale (mean |c|)
//    times the sign of c = g + e, computed naively; the error becomes c − scale·sign(c);
//  - powersgd: a bucket whose matrices are rank-2 products U·Vᵢᵀ with U shared by the ranks (so the
//    sum is rank 2) comes back as the exact sum (within float32 rounding) at r = 2; vectors and
//    matrices too small to compress are summed exactly;
//  - both: nothing is lost — over several steps, Σ_ranks(error) + estimate = Σ_ranks(g + previous
//    error) — and the bytes moved per call equal the formula (parallel/comm.h);
//  - both: the same inputs give bitwise the same outputs on every rank and on a rerun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "parallel/comm.h"
#include "optim/compress/grad_compression.h"

namespace megatrain {
namespace {

std::vector<float> seeded(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// The flat layout of the tests: a vector (5), a 12×9 matrix, a 2×4 matrix (too small to compress
// at r ≥ 2), a 20×7 matrix, a vector (3).
const std::vector<MatrixSpan> kMatrices = {{5, 12, 9}, {113, 2, 4}, {121, 20, 7}};
constexpr int64_t kTotal = 121 + 140 + 3;

TEST(GradCompression, OneBitEqualsTheNaiveSumOfScaledSigns) {
  Comm world = Comm::world();
  const int p = world.size();
  // One block, and two whole blocks plus a tail.
  for (const int64_t n : {kTotal, 2 * kOneBitBlock + 37}) {
    auto c = make_grad_compressor(GradCompression::onebit, world, kMatrices, 2, 7);
    const FlatRange r{0, n};
    std::vector<std::vector<double>> error(static_cast<size_t>(p), std::vector<double>(static_cast<size_t>(n), 0.0));
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = seeded(n, 100 * step + world.rank());
      c->reduce(g.data(), r);
      // Naive: every rank's c = g + e, each block's scale (mean |c|) and the signs, summed in rank order.
      std::vector<float> want(static_cast<size_t>(n), 0.0f);
      for (int q = 0; q < p; ++q) {
        std::vector<float> cq = seeded(n, 100 * step + q);
        for (int64_t i = 0; i < n; ++i) cq[i] += static_cast<float>(error[q][i]);
        for (int64_t lo = 0; lo < n; lo += kOneBitBlock) {
          const int64_t hi = std::min(n, lo + kOneBitBlock);
          double abs_sum = 0.0;
          for (int64_t i = lo; i < hi; ++i) abs_sum += std::fabs(cq[i]);
          const auto scale = static_cast<float>(abs_sum / static_cast<double>(hi - lo));
          for (int64_t i = lo; i < hi; ++i) {
            const float s = cq[i] >= 0.0f ? scale : -scale;
            want[i] += s;
            error[q][i] = cq[i] - s;
          }
        }
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(g[i], want[i]) << "n " << n << " step " << step << " element " << i;
    }
  }
}

TEST(GradCompression, PowerSgdSumsARankTwoBucketExactly) {
  Comm world = Comm::world();
  const int p = world.size();
  auto c = make_grad_compressor(GradCompression::powersgd, world, kMatrices, 2, 7);
  std::vector<float> g = seeded(kTotal, 50 + world.rank());
  std::vector<double> want(kTotal, 0.0);
  for (int q = 0; q < p; ++q) {
    const std::vector<float> gq = seeded(kTotal, 50 + q);
    for (int64_t i = 0; i < kTotal; ++i) want[i] += gq[i];
  }
  // The two compressed matrices become U·Vᵢᵀ: U (rows × 2) shared, Vᵢ (cols × 2) per rank.
  for (const MatrixSpan& m : {kMatrices[0], kMatrices[2]}) {
    const std::vector<float> u = seeded(m.rows * 2, 9);
    std::vector<double> sum(static_cast<size_t>(m.rows * m.cols), 0.0);
    for (int q = 0; q < p; ++q) {
      const std::vector<float> v = seeded(m.cols * 2, 77 + q);
      for (int64_t i = 0; i < m.rows; ++i)
        for (int64_t j = 0; j < m.cols; ++j) {
          const float x = u[i * 2] * v[j * 2] + u[i * 2 + 1] * v[j * 2 + 1];
          if (q == world.rank()) g[m.offset + i * m.cols + j] = x;
          sum[static_cast<size_t>(i * m.cols + j)] += x;
        }
    }
    for (int64_t k = 0; k < m.rows * m.cols; ++k) want[m.offset + k] = sum[static_cast<size_t>(k)];
  }
  c->reduce(g.data(), FlatRange{0, kTotal});
  double largest = 0.0;
  for (double w : want) largest = std::max(largest, std::fabs(w));
  for (int64_t i = 0; i < kTotal; ++i) ASSERT_NEAR(g[i], want[i], 1e-5 * largest) << "element " << i;
}

// Σ over ranks of the carried error plus the estimate equals Σ over ranks of what was compressed
// (the gradient plus the error carried into the step), step after step.
void expect_nothing_lost(GradCompression method) {
  Comm world = Comm::world();
  auto c = make_grad_compressor(method, world, kMatrices, 3, 11);
  const FlatRange r{0, kTotal};
  for (int step = 0; step < 4; ++step) {
    std::vector<float> g = seeded(kTotal, 1000 * step + world.rank(), 0.1f);
    std::vector<double> in(kTotal), out(kTotal);
    const std::vector<float> e_before = c->error(r);
    for (int64_t i = 0; i < kTotal; ++i) in[i] = static_cast<double>(g[i]) + e_before[i];
    c->reduce(g.data(), r);
    const std::vector<float> e_after = c->error(r);
    for (int64_t i = 0; i < kTotal; ++i) out[i] = e_after[i];
    world.all_reduce(in.data(), kTotal).wait();
    world.all_reduce(out.data(), kTotal).wait();
    double largest = 0.0;
    for (double x : in) largest = std::max(largest, std::fabs(x));
    for (int64_t i = 0; i < kTotal; ++i)
      ASSERT_NEAR(out[i] + g[i], in[i], 1e-5 * largest) << grad_compression_name(method) << " step " << step << " at " << i;
    bool carried = false;
    for (float x : e_after) carried = carried || x != 0.0f;
    EXPECT_TRUE(carried) << "a lossy step carries an error";
  }
}

TEST(GradCompression, PowerSgdLosesNothing) { expect_nothing_lost(GradCompression::powersgd); }
TEST(GradCompression, OneBitLosesNothing) { expect_nothing_lost(GradCompression::onebit); }

TEST(GradCompression, BytesMovedEqualTheFormula) {
  Comm world = Comm::world();
  const int64_t p = world.size();
  const FlatRange r{0, kTotal};
  auto allreduce = [&](int64_t floats) { return p > 1 ? 2 * (p - 1) * floats * 4 / p : 0; };
  auto allgather = [&](int64_t bytes_per_rank) { return p > 1 ? (p - 1) * bytes_per_rank * p / p : 0; };
  {
    auto c = make_grad_compressor(GradCompression::powersgd, world, kMatrices, 2, 1);
    std::vector<float> g = seeded(kTotal, world.rank());
    world.reset_stats();
    c->reduce(g.data(), r);
    // P: 2·(12 + 20) floats, Q: 2·(9 + 7), the rest exact: 5 + 8 + 3.
    EXPECT_EQ(world.stats().bytes_moved, allreduce(2 * (12 + 20)) + allreduce(2 * (9 + 7)) + allreduce(5 + 8 + 3));
  }
  {
    auto c = make_grad_compressor(GradCompression::onebit, world, kMatrices, 2, 1);
    std::vector<float> g = seeded(kTotal, world.rank());
    world.reset_stats();
    c->reduce(g.data(), r);
    EXPECT_EQ(world.stats().bytes_moved, allgather((kTotal + 7) / 8) + allgather(4));
  }
}

TEST(GradCompression, RerunIsBitwiseEqual) {
  Comm world = Comm::world();
  for (GradCompression m : {GradCompression::powersgd, GradCompression::onebit}) {
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) {
      auto c = make_grad_compressor(m, world, kMatrices, 2, 5);
      std::vector<float> out;
      for (int step = 0; step < 3; ++step) {
        std::vector<float> g = seeded(kTotal, 10 * step + world.rank());
        c->reduce(g.data(), FlatRange{0, kTotal});
        out.insert(out.end(), g.begin(), g.end());
      }
      runs.push_back(out);
    }
    EXPECT_EQ(runs[0], runs[1]) << grad_compression_name(m);
  }
}

}  // namespace
}  // namespace megatrain
