// Context parallelism's split of each sequence (parallel/context_parallel.h), without MPI: Megatron's
// balanced split gives every rank the same causal work; each rank holds a chunk and its mirror, the
// ranks together every position once; the loader's rows and the runs of consecutive positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <tuple>
#include <vector>

#include "parallel/context_parallel.h"

namespace megatrain {
namespace {

// Megatron's balanced split: every rank's queries see the same number of keys under the causal mask
// (Σ over its positions p of p + 1), where a contiguous split gives the last rank cp² / … times the
// first's; and the split's bookkeeping (positions, the loader's rows, runs of positions).
TEST(CpSplit, EveryRankDoesTheSameCausalWork) {
  for (int cp : {2, 3, 4, 8}) {
    const int T = 2 * cp * 6;
    std::vector<int64_t> balanced, contiguous;
    for (int r = 0; r < cp; ++r) {
      const CpSplit s{cp, r, T};
      int64_t work = 0, naive = 0;
      for (int t = 0; t < s.local_len(); ++t) {
        work += s.position(t) + 1;
        naive += r * s.local_len() + t + 1;
      }
      balanced.push_back(work);
      contiguous.push_back(naive);
    }
    for (int r = 1; r < cp; ++r)
      EXPECT_EQ(balanced[static_cast<size_t>(r)], balanced[0]) << "cp " << cp << " rank " << r;
    EXPECT_GT(contiguous.back(), 2 * contiguous.front()) << "cp " << cp;
  }
}

TEST(CpSplit, RanksHoldChunkAndMirrorAndTogetherEveryPosition) {
  const int cp = 4, T = 16, B = 2;  // chunks of 2
  std::vector<int32_t> full(static_cast<size_t>(B * T));
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<int32_t>(i);
  std::vector<int> seen(static_cast<size_t>(T), 0);
  for (int r = 0; r < cp; ++r) {
    const CpSplit s{cp, r, T};
    std::vector<int32_t> local(static_cast<size_t>(B * s.local_len()));
    s.take_local(full.data(), local.data(), B);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < s.local_len(); ++t) {
        EXPECT_EQ(local[static_cast<size_t>(b * s.local_len() + t)], b * T + s.position(t));
        if (b == 0) ++seen[static_cast<size_t>(s.position(t))];
      }
  }
  EXPECT_EQ(CpSplit({4, 1, 16}).position(0), 2);   // chunk 1
  EXPECT_EQ(CpSplit({4, 1, 16}).position(2), 12);  // chunk 2·4 − 1 − 1 = 6
  for (int n : seen) EXPECT_EQ(n, 1);
}

TEST(CpSplit, PositionRunsBreakAtChunkAndSequenceEnds) {
  const CpSplit s{2, 0, 8};  // rank 0: chunks 0 and 3 (positions 0-1, 6-7); local sequences of 4 rows
  std::vector<std::tuple<int64_t, int64_t, int>> runs;
  for_each_position_run(s, 3, 6, [&](int64_t first, int64_t n, int pos) { runs.emplace_back(first, n, pos); });
  // Rows 3…8 of two sequences: local t = 3 | 0 1 | 2 3 | 0.
  EXPECT_EQ(runs, (std::vector<std::tuple<int64_t, int64_t, int>>{{0, 1, 7}, {1, 2, 0}, {3, 2, 6}, {5, 1, 0}}));
}

}  // namespace
}  // namespace megatrain
