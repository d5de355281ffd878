// kernels/cuda/grad_norm.cu under the host SIMT emulation: Σ x² over a list of ranges (an empty
// one, tails past a chunk, more ranges than one launch holds) against cpu::sum_squares of each, and
// bitwise equal run to run; the NaN/Inf flag with the bad value at the last element of a tail, in
// the middle of a range, and nowhere.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/grad_norm.cu"

#include <gtest/gtest.h>

#include <limits>

#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::randn;

std::vector<std::vector<float>> data_of(const std::vector<size_t>& sizes) {
  std::vector<std::vector<float>> d;
  for (size_t i = 0; i < sizes.size(); ++i) d.push_back(randn(sizes[i], static_cast<uint32_t>(i + 1), 2.0f));
  return d;
}
std::vector<gpu::FloatRange> ranges_of(const std::vector<std::vector<float>>& d) {
  std::vector<gpu::FloatRange> r;
  for (const auto& v : d) r.push_back({v.data(), static_cast<int64_t>(v.size())});
  return r;
}

double gpu_sum_squares(const std::vector<gpu::FloatRange>& r) {
  const int count = static_cast<int>(r.size());
  std::vector<double> scratch(gpu::sum_squares_scratch_doubles(r.data(), count), -1.0);
  double out = -1.0;
  gpu::sum_squares(nullptr, &out, r.data(), count, scratch.data());
  return out;
}

void check_sum_squares(const std::vector<size_t>& sizes, bool twice) {
  const auto d = data_of(sizes);
  const auto r = ranges_of(d);
  double want = 0.0;
  for (const auto& v : d) want += cpu::sum_squares(v.data(), static_cast<int64_t>(v.size()));
  const double got = gpu_sum_squares(r);
  EXPECT_NEAR(got, want, 1e-6 * want + 1e-300);
  if (twice) {
    EXPECT_EQ(got, gpu_sum_squares(r)) << "bitwise reproducible";
  }
}

// A chunk is 8192 elements: 8192 + 5 leaves a 5-element tail block; 0 owns no block.
TEST(SimtGradNorm, SumSquaresOverRanges) { check_sum_squares({1000, 0, 8197, 3, 31, 16384}, true); }

TEST(SimtGradNorm, SumSquaresListLongerThanOneLaunch) {
  std::vector<size_t> sizes;
  // 101 non-empty ranges: two launches of up to 96.
  for (int i = 0; i < 115; ++i) sizes.push_back(static_cast<size_t>(i % 8 == 4 ? 0 : 1 + (i * 53) % 70));
  check_sum_squares(sizes, false);
}

TEST(SimtGradNorm, SumSquaresOfNothingIsZero) {
  EXPECT_EQ(gpu_sum_squares({}), 0.0);
  const std::vector<float> none;
  EXPECT_EQ(gpu_sum_squares({{none.data(), 0}}), 0.0);
}

int flag_of(const std::vector<std::vector<float>>& d) {
  const auto r = ranges_of(d);
  int flag = 0;
  gpu::nonfinite_flag(nullptr, &flag, r.data(), static_cast<int>(r.size()));
  return flag;
}

TEST(SimtGradNorm, NonFiniteFlag) {
  const std::vector<size_t> sizes{300, 0, 8197, 40};
  EXPECT_EQ(flag_of(data_of(sizes)), 0) << "all finite";
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    auto tail = data_of(sizes);
    tail[2].back() = bad;  // the last element of the 5-element tail block
    EXPECT_EQ(flag_of(tail), 1) << bad << " at the end of a tail";
    auto middle = data_of(sizes);
    middle[0][150] = bad;
    EXPECT_EQ(flag_of(middle), 1) << bad << " in the middle";
    auto last = data_of(sizes);
    last[3].back() = bad;  // the list's very last element
    EXPECT_EQ(flag_of(last), 1) << bad << " at the end of the list";
  }
  // The flag is only ever set: a clean list leaves a set flag set.
  int flag = 1;
  const auto r = ranges_of(data_of(sizes));
  gpu::nonfinite_flag(nullptr, &flag, r.data(), static_cast<int>(r.size()));
  EXPECT_EQ(flag, 1);
}

}  // namespace
}  // namespace megatrain
