// Multi-rank tests (np 1, 2, 3, 4, 8) of Comm's point-to-point operations, barrier, split, several
// operations in flight at once, the stats, and the error messages (rank, group, operation).
// Expected values are computed from rank numbers, as in test_comm_collectives.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm_test_util.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

using comm_test::expect_recorded;
using comm_test::test_comms;

TEST(CommP2p, RingSendRecv) {
  for (const Comm& c : test_comms()) {
    const int p = c.size(), r = c.rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
    // Rank r sends r + 4 int64s (and r floats, zero from rank 0) to the next rank.
    std::vector<int64_t> out(static_cast<size_t>(r + 4)), in(static_cast<size_t>(prev + 4), -1);
    for (size_t i = 0; i < out.size(); ++i) out[i] = r * 1000 + static_cast<int64_t>(i);
    std::vector<float> fout(static_cast<size_t>(r), static_cast<float>(r)), fin(static_cast<size_t>(prev), -1.0f);
    const CommStats before = c.stats();
    Work rf = c.recv(fin.data(), prev, prev, 6);
    Work ri = c.recv(in.data(), prev + 4, prev, 5);
    Work sf = c.send(fout.data(), r, next, 6);
    Work si = c.send(out.data(), r + 4, next, 5);
    for (const Work& w : {si, sf, ri, rf}) w.wait();
    expect_recorded(c, before, (r + 4) * 8 + r * 4, 4);
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], prev * 1000 + static_cast<int64_t>(i)) << c.name();
    for (float x : fin) ASSERT_EQ(x, static_cast<float>(prev)) << c.name();
  }
}

// send_recv around a ring, several times in a row with one tag (context parallelism's pattern:
// each rank passes on what it just received): after p − 1 passes every rank has held every rank's
// block, in ring order; one call counts its send's bytes.
TEST(CommP2p, SendRecvPassesBlocksRoundTheRing) {
  for (const Comm& c : test_comms()) {
    const int p = c.size(), r = c.rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
    std::vector<float> held(5, static_cast<float>(r)), incoming(5, -1.0f);
    for (int i = 1; i < p; ++i) {
      const CommStats before = c.stats();
      c.send_recv(held.data(), incoming.data(), 5, next, prev, 3).wait();
      expect_recorded(c, before, 5 * 4, 1);
      held.swap(incoming);
      for (float x : held) ASSERT_EQ(x, static_cast<float>((r - i + p) % p)) << c.name() << " pass " << i;
    }
  }
}

// A ring (to the next rank, from the previous; to itself at one rank), so every rank takes part
// at any size.
TEST(CommP2p, RingExchangeMatchesByTag) {
  const Comm c = Comm::world();
  const int r = c.rank(), p = c.size(), next = (r + 1) % p, prev = (r + p - 1) % p;
  // Two messages sent with tags 2 then 1, received tag 1 first: matching is by tag, not order.
  std::vector<double> a(3, r + 0.5), b(7, r + 0.25), got_a(3), got_b(7);
  Work s2 = c.send(b.data(), 7, next, 2);
  Work s1 = c.send(a.data(), 3, next, 1);
  c.recv(got_a.data(), 3, prev, 1).wait();
  c.recv(got_b.data(), 7, prev, 2).wait();
  s1.wait();
  s2.wait();
  for (double x : got_a) EXPECT_EQ(x, prev + 0.5);
  for (double x : got_b) EXPECT_EQ(x, prev + 0.25);
  // A zero-element message still matches.
  const CommStats before = c.stats();
  Work z = c.send<float>(nullptr, 0, next, c.max_tag());
  c.recv<float>(nullptr, 0, prev, c.max_tag()).wait();
  z.wait();
  expect_recorded(c, before, 0, 2);
}

TEST(CommP2p, Barrier) {
  for (const Comm& c : test_comms()) {
    const CommStats before = c.stats();
    c.barrier();
    Work w = c.barrier_async();
    w.wait();
    EXPECT_TRUE(w.done());
    expect_recorded(c, before, 0, 2);
  }
  EXPECT_TRUE(Work().done());
  Work().wait();
}

TEST(CommP2p, SplitIntoTwoGroupsThenCollectives) {
  const Comm world = Comm::world();
  const int p = world.size(), r = world.rank();
  // Even and odd world ranks, ranked in reverse (key = -rank).
  const Comm sub = world.split(r % 2, -r, r % 2 ? "odd" : "even");
  std::vector<int32_t> members;
  for (int q = p - 1; q >= 0; --q)
    if (q % 2 == r % 2) members.push_back(q);
  ASSERT_EQ(sub.size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[static_cast<size_t>(sub.rank())], r);
  EXPECT_EQ(sub.name(), r % 2 ? "odd" : "even");
  std::vector<int64_t> counts(members.size(), 1);
  std::vector<float> gathered(members.size());
  const float mine = static_cast<float>(r);
  sub.all_gather(gathered.data(), &mine, counts).wait();
  for (size_t i = 0; i < members.size(); ++i) EXPECT_EQ(gathered[i], static_cast<float>(members[i]));
  int64_t sum = r;
  sub.all_reduce(&sum, 1).wait();
  int64_t want = 0;
  for (int q : members) want += q;
  EXPECT_EQ(sum, want);
  EXPECT_EQ(sub.stats().calls, 2);  // the sub-group's stats are its own
}

TEST(CommP2p, SeveralInFlightWaitedInReverse) {
  for (const Comm& c : test_comms()) {
    const int p = c.size(), r = c.rank();
    std::vector<float> a(11, static_cast<float>(r));
    std::vector<int32_t> b(4, r == p - 1 ? 42 : 0);
    std::vector<int64_t> counts(static_cast<size_t>(p), 2);
    std::vector<float> mine(2, static_cast<float>(r)), gathered(static_cast<size_t>(2 * p));
    std::vector<double> m(6, static_cast<double>(r));
    Work wa = c.all_reduce(a.data(), 11);
    Work wb = c.broadcast(b.data(), 4, p - 1);
    Work wc = c.all_gather(gathered.data(), mine.data(), counts);
    Work wd = c.barrier_async();
    Work we = c.all_reduce(m.data(), 6, ReduceOp::max);
    for (const Work& w : {we, wd, wc, wb, wa}) w.wait();
    for (float x : a) EXPECT_EQ(x, static_cast<float>(p * (p - 1) / 2));
    for (int32_t x : b) EXPECT_EQ(x, 42);
    for (int j = 0; j < 2 * p; ++j) EXPECT_EQ(gathered[j], static_cast<float>(j / 2));
    for (double x : m) EXPECT_EQ(x, p - 1.0);
  }
}

TEST(CommP2p, StatsAreSharedByCopiesAndReset) {
  const Comm c = Comm::world().split(0, 0, "stats");
  const Comm copy = c;
  std::vector<float> v(1000, 1.0f);
  copy.all_reduce(v.data(), 1000).wait();
  CommStats s = c.stats();
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.bytes_moved, comm_test::all_reduce_bytes(c.size(), 1000, 4));
  EXPECT_GE(s.busy_ms, 0.0);
  EXPECT_GE(s.exposed_ms, 0.0);
  c.reset_stats();
  s = copy.stats();
  EXPECT_EQ(s.calls, 0);
  EXPECT_EQ(s.bytes_moved, 0);
  EXPECT_EQ(s.busy_ms, 0.0);
  EXPECT_EQ(s.exposed_ms, 0.0);
}

// The message of an Error thrown by fn, or "" when none is thrown.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CommErrors, InvalidArgumentsNameRankGroupAndOperation) {
  const Comm c = Comm::world();
  const std::string where = "rank " + std::to_string(c.rank()) + " group 'world': ";
  float x = 0;
  EXPECT_EQ(error_of([&] { c.send(&x, 1, c.size(), 0); }),
            where + "send failed: peer " + std::to_string(c.size()) + " out of range [0, " + std::to_string(c.size()) +
                ")");
  EXPECT_NE(error_of([&] { c.recv(&x, -1, 0, 0); }).find(where + "recv failed: element count -1"), std::string::npos);
  EXPECT_NE(error_of([&] { c.send(&x, 1, 0, -3); }).find(where + "send failed: tag -3"), std::string::npos);
  EXPECT_NE(error_of([&] { c.broadcast(&x, 1, -1); }).find(where + "broadcast failed: root -1"), std::string::npos);
  const std::vector<int64_t> short_counts(static_cast<size_t>(c.size() + 1), 1);
  std::vector<float> buf(static_cast<size_t>(c.size() + 1));
  EXPECT_NE(error_of([&] { c.all_gather(buf.data(), buf.data(), short_counts); })
                .find(where + "all_gather failed: counts has " + std::to_string(c.size() + 1) + " entries"),
            std::string::npos);
  std::vector<int64_t> negative(static_cast<size_t>(c.size()), 1);
  negative.back() = -2;
  EXPECT_NE(error_of([&] { c.reduce_scatter(buf.data(), buf.data(), negative); }).find("is negative"),
            std::string::npos);
  // Nothing was issued: the communicator still works.
  c.barrier();
}

TEST(CommErrors, FailedWorkThrowsOnEveryWait) {
  const Comm c = Comm::world();
  if (c.size() < 2) GTEST_SKIP() << "needs two ranks";
  // Rank 0 sends 10 ints where rank 1 expects 5: the receive fails (truncation) in the Work.
  std::vector<int32_t> data(10, 7);
  if (c.rank() == 0) c.send(data.data(), 10, 1, 9).wait();
  if (c.rank() == 1) {
    Work w = c.recv(data.data(), 5, 0, 9);
    const std::string msg = error_of([&] { w.wait(); });
    EXPECT_NE(msg.find("rank 1 group 'world': recv failed: "), std::string::npos) << msg;
    EXPECT_TRUE(w.done());
    EXPECT_EQ(error_of([&] { w.wait(); }), msg);
  }
  c.barrier();
}

}  // namespace
}  // namespace megatrain
