// The token exchange of expert parallelism (parallel/expert_dispatch.h) on 1 and 4 ranks, over the
// world, over the world with a max_count of 3 (every exchange through the chunked large-count
// path) and, on 4 ranks, over the ep = 2 groups of ProcessGroups (two exchanges side by side).
// Every row carries (source rank, global expert, index among that source's rows for it), so where
// it lands says where it came from. For seeded counts (with zeros and an expert nobody sends to),
// everything sent to rank 0's experts (the other ranks receive no rows: Megatron-LM #1877 crashed
// there), one rank sending nothing and nobody sending anything: plan() knows every rank's counts;
// dispatch puts exactly the naive expected rows in expert-major order, sources in order; combine
// returns each row to its place in the sender's buffer, bitwise, whether the buffers are exactly
// as large as the rows (empty when there are none) or larger (the tail then stays untouched).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "parallel/expert_dispatch.h"
#include "parallel/groups.h"

namespace megatrain {
namespace {

constexpr int64_t kWidth = 3;     // floats per row: source, expert, index
constexpr float kUntouched = -7;  // what the buffers hold before an exchange

enum class Pattern { random, all_to_rank0, last_sends_nothing, nothing };

// counts[s][e]: rows rank s sends to global expert e; the same on every rank of the group.
std::vector<std::vector<int64_t>> send_counts(Pattern pattern, int ranks, int experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int64_t>> c(static_cast<size_t>(ranks), std::vector<int64_t>(static_cast<size_t>(experts)));
  const int local = experts / ranks;
  for (int s = 0; s < ranks; ++s)
    for (int e = 0; e < experts; ++e) {
      int64_t n = static_cast<int64_t>(rng() % 6);  // zeros included
      if (pattern == Pattern::nothing || (pattern == Pattern::all_to_rank0 && e >= local) ||
          (pattern == Pattern::last_sends_nothing && s == ranks - 1))
        n = 0;
      if (pattern == Pattern::all_to_rank0 && e < local) n += 1;  // everyone sends to rank 0
      if (pattern == Pattern::random && e == experts - 1) n = 0;  // an expert nobody sends to
      c[static_cast<size_t>(s)][static_cast<size_t>(e)] = n;
    }
  return c;
}

std::vector<float> row(int source, int expert, int64_t index) {
  return {static_cast<float>(source), static_cast<float>(expert), static_cast<float>(index)};
}

void append(std::vector<float>& to, const std::vector<float>& r) { to.insert(to.end(), r.begin(), r.end()); }

// A buffer of `rows` rows plus `spare` rows, all kUntouched; a Tensor over it (null when empty).
struct Buffer {
  std::vector<float> data;
  Buffer(int64_t rows, int64_t spare) : data(static_cast<size_t>((rows + spare) * kWidth), kUntouched) {}
  Tensor tensor() {
    return Tensor(data.empty() ? nullptr : data.data(), Shape{static_cast<int64_t>(data.size()) / kWidth, kWidth});
  }
  std::vector<float> head(int64_t rows) const { return {data.begin(), data.begin() + rows * kWidth}; }
  std::vector<float> tail(int64_t rows) const { return {data.begin() + rows * kWidth, data.end()}; }
};

// The groups every case runs on: the world, its chunked copy and, on 4 ranks, the ep = 2 groups.
std::vector<Comm> ep_groups() {
  const Comm world = Comm::world();
  std::vector<Comm> g{world, world.split(0, world.rank(), "chunked", CommOptions{.max_count = 3})};
  if (world.size() == 4) g.push_back(ProcessGroups(world, ParallelDims{1, 1, 2, 4, 1}).ep());
  return g;
}

struct Case {
  Pattern pattern;
  int experts_per_rank;
  int64_t spare_rows;
  uint32_t seed;
};

void check_exchange(const Comm& group, const Case& k) {
  const int P = group.size(), r = group.rank(), El = k.experts_per_rank, E = El * P;
  const std::string where = "group " + group.name() + " of " + std::to_string(P) + ", pattern " +
                            std::to_string(static_cast<int>(k.pattern)) + ", " + std::to_string(El) +
                            " experts per rank, spare rows " + std::to_string(k.spare_rows) + ", rank " +
                            std::to_string(r);
  SCOPED_TRACE(where);
  const auto counts = send_counts(k.pattern, P, E, k.seed);
  const auto at = [&](int s, int e) { return counts[static_cast<size_t>(s)][static_cast<size_t>(e)]; };
  const ExpertDispatch d(group, E, kWidth);
  ASSERT_EQ(d.ep_size(), P);
  ASSERT_EQ(d.ep_rank(), r);
  ASSERT_EQ(d.local_experts(), El);

  // The naive expectations: this rank's send buffer (destination-major, expert-minor), and what its
  // experts receive, source-major and expert-major.
  std::vector<float> send, by_source, grouped;
  for (int e = 0; e < E; ++e)
    for (int64_t i = 0; i < at(r, e); ++i) append(send, row(r, e, i));
  for (int s = 0; s < P; ++s)
    for (int x = 0; x < El; ++x)
      for (int64_t i = 0; i < at(s, r * El + x); ++i) append(by_source, row(s, r * El + x, i));
  for (int x = 0; x < El; ++x)
    for (int s = 0; s < P; ++s)
      for (int64_t i = 0; i < at(s, r * El + x); ++i) append(grouped, row(s, r * El + x, i));
  const int64_t S = static_cast<int64_t>(send.size()) / kWidth, R = static_cast<int64_t>(grouped.size()) / kWidth;
  if (k.pattern == Pattern::all_to_rank0 && r > 0) {
    ASSERT_EQ(R, 0);  // the case this pattern is for
  }

  DispatchCounts c;
  d.plan(c, counts[static_cast<size_t>(r)].data());
  ASSERT_EQ(c.all.size(), static_cast<size_t>(P * E));
  for (int s = 0; s < P; ++s)
    for (int e = 0; e < E; ++e)
      ASSERT_EQ(c.all[static_cast<size_t>(s * E + e)], at(s, e)) << "source " << s << " expert " << e;
  EXPECT_EQ(c.sent, S);
  EXPECT_EQ(c.received, R);
  int64_t offset = 0;
  for (int x = 0; x < El; ++x) {
    int64_t n = 0;
    for (int s = 0; s < P; ++s) n += at(s, r * El + x);
    EXPECT_EQ(d.expert_rows(c, x), n) << "local expert " << x;
    EXPECT_EQ(d.expert_offset(c, x), offset) << "local expert " << x;
    offset += n;
  }

  Buffer send_buf(S, k.spare_rows), by_source_buf(R, k.spare_rows), grouped_buf(R, k.spare_rows);
  std::copy(send.begin(), send.end(), send_buf.data.begin());
  d.dispatch_start(c, by_source_buf.tensor(), send_buf.tensor()).wait();
  EXPECT_EQ(by_source_buf.head(R), by_source);
  EXPECT_EQ(by_source_buf.tail(R), std::vector<float>(static_cast<size_t>(k.spare_rows * kWidth), kUntouched));
  d.dispatch_finish(c, grouped_buf.tensor(), by_source_buf.tensor());
  EXPECT_EQ(grouped_buf.head(R), grouped);
  EXPECT_EQ(grouped_buf.tail(R), std::vector<float>(static_cast<size_t>(k.spare_rows * kWidth), kUntouched));

  // The experts mark each row with the rank that holds them (+1000 per rank in the index column);
  // combine brings every row back to where it was sent from, so the sender sees its own rows,
  // each marked by its expert's owner, in its send order.
  const auto index_of_row = [](std::vector<float>& v, int64_t i) -> float& {
    return v[static_cast<size_t>(i * kWidth + 2)];
  };
  for (int64_t i = 0; i < R; ++i) index_of_row(grouped_buf.data, i) += 1000.0f * static_cast<float>(r + 1);
  Buffer back_by_source(R, k.spare_rows), back(S, k.spare_rows);
  d.combine_regroup(c, back_by_source.tensor(), grouped_buf.tensor());
  d.combine_start(c, back.tensor(), back_by_source.tensor()).wait();
  std::vector<float> want = send;
  for (int64_t i = 0; i < S; ++i) {
    const int owner = static_cast<int>(want[static_cast<size_t>(i * kWidth + 1)]) / El;  // of the row's expert
    index_of_row(want, i) += 1000.0f * static_cast<float>(owner + 1);
  }
  EXPECT_EQ(back.head(S), want);
  EXPECT_EQ(back.tail(S), std::vector<float>(static_cast<size_t>(k.spare_rows * kWidth), kUntouched));

  // Unmarked, combine is dispatch's inverse: the send buffer comes back bitwise.
  Buffer again_by_source(R, 0), again_grouped(R, 0), again(S, 0);
  d.dispatch_start(c, again_by_source.tensor(), send_buf.tensor()).wait();
  d.dispatch_finish(c, again_grouped.tensor(), again_by_source.tensor());
  d.combine_regroup(c, again_by_source.tensor(), again_grouped.tensor());
  d.combine_start(c, again.tensor(), again_by_source.tensor()).wait();
  EXPECT_EQ(again.data, send);
}

TEST(ExpertDispatch, EveryCountPatternMovesExactlyTheExpectedRowsAndBack) {
  for (const Comm& group : ep_groups())
    for (const Pattern p : {Pattern::random, Pattern::all_to_rank0, Pattern::last_sends_nothing, Pattern::nothing})
      for (const int El : {1, 3})
        for (const int64_t spare : {int64_t{0}, int64_t{2}})
          for (const uint32_t seed : {1u, 2u}) check_exchange(group, Case{p, El, spare, seed});
}

// Without a group (ep = 1) the exchange is a local copy with the same bookkeeping.
TEST(ExpertDispatch, WithoutAGroupRowsStayOnThisRank) {
  const auto counts = send_counts(Pattern::random, 1, 4, 5);
  const ExpertDispatch d(std::nullopt, 4, kWidth);
  ASSERT_EQ(d.ep_size(), 1);
  DispatchCounts c;
  d.plan(c, counts[0].data());
  EXPECT_EQ(c.all, counts[0]);
  std::vector<float> send;
  for (int e = 0; e < 4; ++e)
    for (int64_t i = 0; i < counts[0][static_cast<size_t>(e)]; ++i) append(send, row(0, e, i));
  const int64_t S = static_cast<int64_t>(send.size()) / kWidth;
  EXPECT_EQ(c.sent, S);
  EXPECT_EQ(c.received, S);
  EXPECT_EQ(d.expert_offset(c, 3), S - counts[0][3]);
  Buffer by_source(S, 0), grouped(S, 0), back(S, 0);
  d.dispatch_start(c, by_source.tensor(), Tensor(send.data(), Shape{S, kWidth})).wait();
  d.dispatch_finish(c, grouped.tensor(), by_source.tensor());
  EXPECT_EQ(grouped.data, send);
  d.combine_regroup(c, by_source.tensor(), grouped.tensor());
  d.combine_start(c, back.tensor(), by_source.tensor()).wait();
  EXPECT_EQ(back.data, send);
}

}  // namespace
}  // namespace megatrain
