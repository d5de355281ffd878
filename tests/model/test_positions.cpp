// RowPositions (model/positions.h): the map from a stage's rows to their positions in the sequence,
// against the context-parallel split's own position(t) row by row, and RoPE at those positions
// (rope_at) against the kernel applied to each row alone at its position.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/rng.h"
#include "model/positions.h"

namespace megatrain {
namespace {

using PositionRun = std::tuple<int64_t, int64_t, int>;

std::vector<PositionRun> runs(const RowPositions& p, int64_t first_row, int64_t rows) {
  std::vector<PositionRun> out;
  p.for_each_run(first_row, rows,
                 [&](int64_t first, int64_t n, int position) { out.emplace_back(first, n, position); });
  return out;
}

// The position of every row in [first_row, first_row + rows), expanded from the runs.
std::vector<int> expand(const RowPositions& p, int64_t first_row, int64_t rows) {
  std::vector<int> out(static_cast<size_t>(rows), -1);
  for (const auto& [first, n, position] : runs(p, first_row, rows))
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(first + i)] = position + static_cast<int>(i);
  return out;
}

TEST(RowPositions, IdentityRunsBreakWhereASequenceEnds) {
  const RowPositions p = RowPositions::identity(2, 5);
  EXPECT_EQ(p.seq_len(), 5);
  EXPECT_EQ(p.rows_before(), 0);
  EXPECT_EQ(runs(p, 0, 10), (std::vector<PositionRun>{{0, 5, 0}, {5, 5, 0}}));
  // A sequence-parallel shard of rows 3..6: the end of the first sequence, the start of the second.
  EXPECT_EQ(runs(p, 3, 4), (std::vector<PositionRun>{{0, 2, 3}, {2, 2, 0}}));
  // The decoder's chunk: one sequence from position 7 on.
  EXPECT_EQ(runs(RowPositions::identity(1, 3, 7), 0, 3), (std::vector<PositionRun>{{0, 3, 7}}));
}

TEST(RowPositions, ASplitsRowsSitWhereTheSplitSays) {
  for (int cp : {2, 4})
    for (int rank = 0; rank < cp; ++rank) {
      const CpSplit split{cp, rank, 8 * cp};
      const int B = 3, Tl = split.local_len();
      const RowPositions p = RowPositions::of_split(split, B);
      EXPECT_EQ(p.rows_before(), int64_t{rank} * Tl);
      EXPECT_EQ(p.seq_len(), split.seq_len);
      for (int64_t first : {int64_t{0}, int64_t{3}, int64_t{Tl}}) {
        const int64_t rows = int64_t{B} * Tl - first;
        const std::vector<int> got = expand(p, first, rows);
        for (int64_t i = 0; i < rows; ++i)
          ASSERT_EQ(got[static_cast<size_t>(i)], split.position(static_cast<int>((first + i) % Tl)))
              << "cp " << cp << " rank " << rank << " row " << first + i;
      }
    }
}

// qkv (B, T, (H + 2·Hkv)·D) with seeded values.
std::vector<float> seeded(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = 2.0f * rng_uniform(RngKey{3, 1, 0, 0}, static_cast<uint64_t>(i)) - 1.0f;
  return v;
}

TEST(RowPositions, RopeAtThePositionsIsTheKernelOnEachRowAtItsPosition) {
  const int H = 2, Hkv = 1, D = 8, B = 2;
  const int64_t w = (H + 2 * Hkv) * D;
  for (const CpSplit split : {CpSplit{1, 0, 6}, CpSplit{2, 1, 8}, CpSplit{4, 2, 16}}) {
    const RowPositions p = split.cp == 1 ? RowPositions::identity(B, split.seq_len) : RowPositions::of_split(split, B);
    const int Tl = p.local_len();
    for (RopeDirection dir : {RopeDirection::forward, RopeDirection::backward}) {
      std::vector<float> got = seeded(B * Tl * w), want = got;
      rope_at(Stream::cpu(), Tensor(got.data(), Shape{B, Tl, w}), p, H, Hkv, RopeFrequencies{10000.0}, dir);
      for (int64_t r = 0; r < int64_t{B} * Tl; ++r) {
        const int position = split.cp == 1 ? static_cast<int>(r % Tl) : split.position(static_cast<int>(r % Tl));
        rope_apply(Stream::cpu(), Tensor(want.data() + r * w, Shape{1, 1, w}), H, Hkv, RopeFrequencies{10000.0}, dir,
                   position);
      }
      EXPECT_EQ(got, want) << "cp " << split.cp;
    }
  }
}

// Documents (data.reset_position_ids): positions restart at each document's first position, in
// every sequence on its own and under the context-parallel split (whose rows are out of order).
TEST(RowPositions, RestartedPositionsAreEachRowsDistanceFromItsDocumentsStart) {
  const int B = 2, T = 8;
  // Sequence 0: documents [0, 3) [3, 4) [4, 8); sequence 1: one document.
  const std::vector<int32_t> starts{0, 0, 0, 3, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0};
  const RowPositions p = RowPositions::restarted(RowPositions::identity(B, T), starts.data());
  EXPECT_EQ(expand(p, 0, B * T), (std::vector<int>{0, 1, 2, 0, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(runs(p, 0, B * T), (std::vector<PositionRun>{{0, 3, 0}, {3, 1, 0}, {4, 4, 0}, {8, 8, 0}}));
  EXPECT_EQ(p.seq_len(), T);
  for (int rank = 0; rank < 2; ++rank) {
    const CpSplit split{2, rank, T};
    const RowPositions cp = RowPositions::restarted(RowPositions::of_split(split, B), starts.data());
    EXPECT_EQ(cp.rows_before(), rank * split.local_len());
    const std::vector<int> got = expand(cp, 0, B * split.local_len());
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < split.local_len(); ++t) {
        const int at = split.position(t);
        EXPECT_EQ(got[static_cast<size_t>(b * split.local_len() + t)], at - starts[static_cast<size_t>(b * T + at)])
            << "rank " << rank << " sequence " << b << " row " << t;
      }
  }
}

}  // namespace
}  // namespace megatrain
