// The flight recorder (parallel/flight_recorder.h) on 1–8 ranks: a split group records its members
// as world ranks; every member numbers the group's collectives alike (gathered and compared across
// ranks); sends and receives are numbered per peer and direction; completed operations are marked
// done with an end time, and the ring keeps only its newest entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "parallel/comm.h"
#include "parallel/flight_recorder.h"

namespace megatrain {
namespace {

// This process's records of group `g`, oldest first.
std::vector<FlightRecord> records_of(int g) {
  std::vector<FlightRecord> out;
  for (const FlightRecord& r : FlightRecorder::instance().snapshot().records)
    if (r.group == g) out.push_back(r);
  return out;
}

TEST(FlightRecorder, MembersAreWorldRanksAndCollectivesAreNumberedAlikeOnEveryMember) {
  const Comm world = Comm::world();
  const int p = world.size(), r = world.rank();
  // Reverse order within two halves: group rank i is not world rank i.
  const Comm half = world.split(r % 2, -r, "half");
  const FlightSnapshot before = FlightRecorder::instance().snapshot();
  const int g = static_cast<int>(before.groups.size()) - 1;
  ASSERT_EQ(before.groups[static_cast<size_t>(g)].name, "half");
  std::vector<int> expected;
  for (int w = p - 1; w >= 0; --w)
    if (w % 2 == r % 2) expected.push_back(w);
  EXPECT_EQ(before.groups[static_cast<size_t>(g)].members, expected);

  double x = 1.0;
  int64_t y[3] = {1, 2, 3};
  half.all_reduce(&x, 1).wait();
  half.broadcast(y, 3, 0).wait();
  half.barrier();
  const std::vector<FlightRecord> mine = records_of(g);
  ASSERT_EQ(mine.size(), 3u);
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(mine[i].seq, static_cast<int64_t>(i));
    EXPECT_EQ(mine[i].state, FlightState::done);
    EXPECT_GE(mine[i].t_end, mine[i].t_issue);
  }
  EXPECT_EQ(mine[0].op, "all_reduce");
  EXPECT_EQ(mine[0].dtype, "f64");
  EXPECT_EQ(mine[1].op, "broadcast");
  EXPECT_EQ(mine[1].count, 3);
  EXPECT_EQ(mine[2].op, "barrier");
  // Every member of the group holds the same (seq, op, count) list.
  std::vector<int64_t> sig;
  for (const FlightRecord& rec : mine) sig.insert(sig.end(), {rec.seq, static_cast<int64_t>(rec.op.size()), rec.count});
  std::vector<int64_t> all(sig.size() * static_cast<size_t>(half.size()));
  std::vector<int64_t> counts(static_cast<size_t>(half.size()), static_cast<int64_t>(sig.size()));
  half.all_gather(all.data(), sig.data(), counts).wait();
  for (int m = 0; m < half.size(); ++m)
    EXPECT_TRUE(std::equal(sig.begin(), sig.end(), all.begin() + m * static_cast<int64_t>(sig.size()))) << "member " << m;
}

TEST(FlightRecorder, SendsAndReceivesAreNumberedPerPeerAndDirection) {
  const Comm c = Comm::world().split(0, 0, "ring");
  const int p = c.size(), r = c.rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  const int g = static_cast<int>(FlightRecorder::instance().snapshot().groups.size()) - 1;
  float out[2] = {1, 2}, in[2] = {};
  for (int k = 0; k < 3; ++k) {
    Work rv = c.recv(in, 2, prev, 1);
    c.send(out, 2, next, 1).wait();
    rv.wait();
  }
  const std::vector<FlightRecord> mine = records_of(g);
  ASSERT_EQ(mine.size(), 6u);
  int64_t sends = 0, recvs = 0;
  for (const FlightRecord& rec : mine) {
    if (rec.op == "send") {
      EXPECT_EQ(rec.peer, next);
      EXPECT_EQ(rec.seq, sends++);
    } else {
      EXPECT_EQ(rec.op, "recv");
      EXPECT_EQ(rec.peer, prev);
      EXPECT_EQ(rec.seq, recvs++);
    }
  }
}

TEST(FlightRecorder, TheRingKeepsTheNewestEntries) {
  FlightRecorder& fr = FlightRecorder::instance();
  const int g = fr.add_group("local", {0});
  fr.set_capacity(4);
  int64_t last = -1;
  for (int i = 0; i < 10; ++i) last = fr.issue(g, "all_reduce", i, "f32");
  fr.complete(last, false);
  const FlightSnapshot s = fr.snapshot();
  ASSERT_EQ(s.records.size(), 4u);
  EXPECT_EQ(s.records.front().seq, 6);
  EXPECT_EQ(s.records.back().seq, 9);
  EXPECT_EQ(s.records.back().state, FlightState::failed);
  EXPECT_EQ(s.records[2].state, FlightState::in_flight);
  fr.set_capacity(2000);
}

}  // namespace
}  // namespace megatrain
