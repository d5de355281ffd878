// `megatrain diagnose` (health/flight_analysis.h) on hand-built dumps of 4 ranks laid out as
// tp = dp = 2 (tp groups [0,1] [2,3], dp groups [0,2] [1,3]): the rank that stopped is named and
// the ranks blocked behind it are not; a rank that spins (dumps, but never issued the operation)
// is named the same way; a send whose receive was never posted names the receiver; different
// operations under one number are a desync; dumps survive their JSON form; a host every other host
// finds silent is cut off; a rank not scheduled while its peers waited is frozen.
#include <gtest/gtest.h>

#include "health/flight_analysis.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

const std::vector<FlightGroup> kGroups = {{"world", {0, 1, 2, 3}}, {"tp", {0, 1}}, {"tp", {2, 3}},
                                          {"dp", {0, 2}},          {"dp", {1, 3}}};

// Rank r's dump: its groups (world, its tp, its dp), then `n` done collectives per listed group
// (group index in the dump, count), then one in flight if `stuck_group` ≥ 0.
FlightDump dump(int rank, std::vector<std::pair<int, int64_t>> done, int stuck_group) {
  FlightDump d;
  d.rank = rank, d.host = "h", d.reason = "watchdog: test";
  d.snapshot.groups = {kGroups[0], kGroups[1 + rank / 2], kGroups[3 + rank % 2]};
  int64_t id = 0;
  for (const auto& [g, n] : done)
    for (int64_t s = 0; s < n; ++s)
      d.snapshot.records.push_back({id++, g, s, "all_reduce", 8, "f32", -1, 0.0, 1.0, FlightState::done});
  if (stuck_group >= 0) {
    int64_t seq = 0;
    for (const auto& [g, n] : done)
      if (g == stuck_group) seq = n;
    d.snapshot.records.push_back({id++, stuck_group, seq, "all_reduce", 8, "f32", -1, 2.0, -1.0, FlightState::in_flight});
  }
  return d;
}

TEST(FlightAnalysis, AStoppedRankIsNamedAndTheRanksBehindItAreNot) {
  // Rank 1 stopped before tp collective 5: rank 0 waits for it in tp; ranks 2 and 3 finished their
  // tp work and wait in dp, where rank 0 (blocked on rank 1) and rank 1 never arrive.
  const std::vector<FlightDump> dumps = {dump(0, {{1, 5}, {2, 2}}, 1), dump(2, {{1, 6}, {2, 2}}, 2),
                                         dump(3, {{1, 6}, {2, 2}}, 2)};
  const FlightDiagnosis d = diagnose_flights(dumps);
  EXPECT_EQ(d.without_dump, std::vector<int>{1});
  EXPECT_EQ(d.not_arrived, std::set<int>{1});
  const std::string report = format_diagnosis(dumps, d);
  EXPECT_CONTAINS(report, "HANG seq=5 all_reduce group 'tp' [0,1] missing ranks: {1} (waiting: 0)");
  EXPECT_CONTAINS(report, "HANG seq=2 all_reduce group 'dp' [0,2] missing ranks: {0} (waiting: 2)");
  EXPECT_CONTAINS(report, "no dump from rank(s) {1}");
  EXPECT_CONTAINS(report, "VERDICT rank(s) {1} did not arrive");
}

TEST(FlightAnalysis, ASpinningRankThatDumpedIsNamedByWhatItNeverIssued) {
  const std::vector<FlightDump> dumps = {dump(0, {{1, 5}, {2, 2}}, 1), dump(1, {{1, 5}, {2, 2}}, -1),
                                         dump(2, {{1, 6}, {2, 2}}, 2), dump(3, {{1, 6}, {2, 2}}, 2)};
  const FlightDiagnosis d = diagnose_flights(dumps);
  EXPECT_TRUE(d.without_dump.empty());
  EXPECT_EQ(d.not_arrived, std::set<int>{1});
}

// Rank 0 issued one collective too many in the world group: it waits in world #3, which the others
// never reach, while they wait in tp/dp collectives rank 0 has not reached: an order desync, and
// rank 0 (the smaller side) is named.
TEST(FlightAnalysis, RanksWaitingForEachOtherInTwoCollectivesAreAnOrderDesync) {
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 4; ++r) {
    FlightDump d;
    d.rank = r, d.host = "h", d.reason = "watchdog: test";
    d.snapshot.groups = {{"world", {0, 1, 2, 3}}, {"dp", {0, 1, 2, 3}}};
    for (int64_t s = 0; s < 3; ++s) d.snapshot.records.push_back({s, 0, s, "all_reduce", 1, "i64", -1, 0.0, 1.0, FlightState::done});
    for (int64_t s = 0; s < 5; ++s) d.snapshot.records.push_back({3 + s, 1, s, "all_reduce", 8, "f32", -1, 0.0, 1.0, FlightState::done});
    if (r == 0)
      d.snapshot.records.push_back({9, 0, 3, "all_reduce", 3, "i32", -1, 2.0, -1.0, FlightState::in_flight});
    else
      d.snapshot.records.push_back({9, 1, 5, "all_reduce", 8, "f32", -1, 2.0, -1.0, FlightState::in_flight});
    dumps.push_back(d);
  }
  const FlightDiagnosis d = diagnose_flights(dumps);
  EXPECT_EQ(d.out_of_order, std::set<int>{0});
  EXPECT_EQ(d.not_arrived, std::set<int>{0});
  const std::string report = format_diagnosis(dumps, d);
  EXPECT_CONTAINS(report, "DESYNC order: rank(s) {0} wait in all_reduce group 'world' [0,1,2,3] seq=3 while rank(s) "
                          "{1,2,3} wait for them in all_reduce group 'dp' [0,1,2,3] seq=5");
  EXPECT_CONTAINS(report, "VERDICT rank(s) {0} issued collectives in another order");
}

TEST(FlightAnalysis, ASendWhoseReceiveWasNeverPostedNamesTheReceiver) {
  FlightDump a, b;
  a.rank = 0, b.rank = 1;
  a.snapshot.groups = b.snapshot.groups = {{"pp", {0, 1}}};
  a.snapshot.records = {{0, 0, 0, "send", 4, "f32", 1, 0, 1, FlightState::done},
                        {1, 0, 1, "send", 4, "f32", 1, 1, -1, FlightState::in_flight}};
  b.snapshot.records = {{0, 0, 0, "recv", 4, "f32", 0, 0, 1, FlightState::done}};
  const FlightDiagnosis d = diagnose_flights({a, b});
  EXPECT_EQ(d.not_arrived, std::set<int>{1});
  ASSERT_EQ(d.hangs.size(), 1u);
  EXPECT_CONTAINS(d.hangs[0], "send #1 rank 0 → rank 1 group 'pp' [0,1]: rank 1 has not posted the recv");
  b.snapshot.records.push_back({1, 0, 1, "recv", 4, "f32", 0, 1, -1, FlightState::in_flight});  // now both wait
  EXPECT_TRUE(diagnose_flights({a, b}).hangs.empty());
}

TEST(FlightAnalysis, DifferentOperationsUnderOneNumberAreADesync) {
  FlightDump a = dump(0, {{0, 3}}, -1), b = dump(1, {{0, 3}}, -1);
  a.snapshot.records.push_back({9, 0, 3, "all_reduce", 3, "i64", -1, 0, -1, FlightState::in_flight});
  b.snapshot.records.push_back({9, 0, 3, "all_reduce", 1, "f64", -1, 0, -1, FlightState::in_flight});
  const FlightDiagnosis d = diagnose_flights({a, b});
  ASSERT_EQ(d.desyncs.size(), 1u);
  EXPECT_EQ(d.desyncs[0], "group 'world' [0,1,2,3] seq=3: rank 0 all_reduce 3 x i64, rank 1 all_reduce 1 x f64");
  // all_to_all counts differ by design.
  a.snapshot.records.back().op = b.snapshot.records.back().op = "all_to_all";
  a.snapshot.records.back().dtype = b.snapshot.records.back().dtype = "f32";
  EXPECT_TRUE(diagnose_flights({a, b}).desyncs.empty());
}

TEST(FlightAnalysis, NothingInFlightMeansNoVerdictAgainstAnyRank) {
  const std::vector<FlightDump> dumps = {dump(0, {{1, 5}}, -1), dump(1, {{1, 5}}, -1), dump(2, {{1, 5}}, -1),
                                         dump(3, {{1, 5}}, -1)};
  const FlightDiagnosis d = diagnose_flights(dumps);
  EXPECT_TRUE(d.not_arrived.empty());
  EXPECT_CONTAINS(format_diagnosis(dumps, d), "VERDICT no operation is waiting on a rank in these dumps");
}

TEST(FlightAnalysis, DumpsRoundTripThroughJsonAndDamagedOnesAreDataErrors) {
  FlightDump d = dump(2, {{1, 3}, {2, 1}}, 2);
  d.pid = 4242, d.section = "step", d.step = 20, d.t_wall = 1.7e9, d.snapshot.completed = 77, d.snapshot.now = 12.5;
  const FlightDump back = parse_flight_dump(flight_dump_json(d), "x.json");
  EXPECT_EQ(flight_dump_json(back), flight_dump_json(d));
  EXPECT_EQ(back.snapshot.records.size(), 5u);
  EXPECT_EQ(back.snapshot.records.back().state, FlightState::in_flight);
  EXPECT_THROW(parse_flight_dump("{\"rank\": 1}", "fr/rank_1.json"), DataError);
  try {
    parse_flight_dump("not json", "fr/rank_1.json");
  } catch (const DataError& e) {
    EXPECT_CONTAINS(e.what(), "fr/rank_1.json: not a flight-recorder dump");
  }
}


// Three hosts of one rank each (ranks 0, 1, 2 in one dp group), all inside dp all-reduce 7: nobody
// is missing. What each dump saw of its peers decides: the host every other host found silent is
// cut off; a refusal (the host answered, its rank is gone) or a single witness's doubt is not that.
FlightDump host_dump(int rank, std::vector<std::string> reach) {
  FlightDump d;
  d.rank = rank, d.host = "host" + std::to_string(rank), d.reason = "watchdog: test";
  d.snapshot.groups = {{"dp", {0, 1, 2}}};
  d.snapshot.records.push_back({0, 0, 7, "all_reduce", 8, "f32", -1, 2.0, -1.0, FlightState::in_flight});
  for (int r = 0, k = 0; r < 3; ++r)
    if (r != rank) d.peers.push_back({r, "host" + std::to_string(r), reach[static_cast<size_t>(k++)]});
  return d;
}

TEST(FlightAnalysis, AHostEveryOtherHostFindsSilentIsCutOff) {
  const std::vector<FlightDump> dumps = {host_dump(0, {"silent", "yes"}), host_dump(1, {"silent", "silent"}),
                                         host_dump(2, {"yes", "silent"})};
  const FlightDiagnosis d = diagnose_flights(dumps);
  EXPECT_EQ(d.unreachable_hosts, std::vector<std::string>{"host1"});
  EXPECT_TRUE(d.not_arrived.empty());
  EXPECT_TRUE(d.named_cause());
  const std::string report = format_diagnosis(dumps, d);
  EXPECT_CONTAINS(report, "HANG seq=7 all_reduce group 'dp' [0,1,2]: every member is inside it, none missing");
  EXPECT_CONTAINS(report, "VERDICT host host1 is cut off from the network");
}

TEST(FlightAnalysis, ARefusalOrOneWitnessIsNotACutOffHost) {
  // Rank 1's process is gone but its host answers: refused, not silent.
  auto d = diagnose_flights({host_dump(0, {"refused", "yes"}), host_dump(2, {"yes", "refused"})});
  EXPECT_TRUE(d.unreachable_hosts.empty());
  // Host 0 finds host 1 silent, host 2 reaches it: the fault is not host 1's alone.
  d = diagnose_flights({host_dump(0, {"silent", "yes"}), host_dump(1, {"yes", "yes"}), host_dump(2, {"yes", "yes"})});
  EXPECT_TRUE(d.unreachable_hosts.empty());
  EXPECT_FALSE(d.named_cause());
}

TEST(FlightAnalysis, PeerStatusesSurviveTheDumpsJson) {
  const FlightDump d = host_dump(1, {"silent", "refused"});
  const FlightDump back = parse_flight_dump(flight_dump_json(d), "test");
  ASSERT_EQ(back.peers.size(), 2u);
  EXPECT_EQ(back.peers[0].rank, 0);
  EXPECT_EQ(back.peers[0].host, "host0");
  EXPECT_EQ(back.peers[0].reach, "silent");
  EXPECT_EQ(back.peers[1].reach, "refused");
}

// The hang found by hand (docs/robustness.md R02(c)): rank 2 of a 4-rank dp group stopped inside
// all-reduce 7 after issuing it; ranks 0, 1, 3 fired after waiting 5 s (t_wall 100 to 105); rank 2,
// resumed by mpirun's teardown at 106, dumped too. Every member is inside the collective.
std::vector<FlightDump> frozen_inside_a_collective(double from, double to) {
  const std::vector<FlightGroup> dp = {{"dp", {0, 1, 2, 3}}};
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 4; ++r) {
    FlightDump d;
    d.rank = r, d.host = "h" + std::to_string(r / 2), d.reason = "watchdog: test";
    d.snapshot.groups = dp;
    for (int64_t s = 0; s < 7; ++s) d.snapshot.records.push_back({s, 0, s, "all_reduce", 8, "f32", -1, 0.0, 1.0, FlightState::done});
    d.snapshot.records.push_back({7, 0, 7, "all_reduce", 8, "f32", -1, 2.0, -1.0, FlightState::in_flight});
    d.t_wall = r == 2 ? 106.0 : 105.0, d.stale_s = r == 2 ? 6.0 : 5.0;
    if (r == 2) d.unscheduled = {{from, to}};
    dumps.push_back(d);
  }
  return dumps;
}

TEST(FlightAnalysis, ARankFrozenInsideACollectiveIsNamedByItsUnscheduledStretch) {
  const std::vector<FlightDump> dumps = frozen_inside_a_collective(100.0, 106.0);
  const FlightDiagnosis d = diagnose_flights(dumps);
  EXPECT_TRUE(d.not_arrived.empty());
  EXPECT_EQ(d.frozen, std::set<int>{2});
  EXPECT_TRUE(d.named_cause());
  const std::string report = format_diagnosis(dumps, d);
  EXPECT_CONTAINS(report, "every member is inside it, none missing");
  EXPECT_CONTAINS(report, "FROZEN rank 2 host h1: not scheduled for 6.0 s (t_wall 100.000 to 106.000) while rank(s) "
                          "{0,1,3} waited");
  EXPECT_CONTAINS(report, "VERDICT rank(s) {2} were frozen (host h1): ");
}

TEST(FlightAnalysis, AnUnscheduledStretchOutsideThePeersWaitIsNotAFreeze) {
  // A second of not being scheduled long before the others started waiting (load, not the hang).
  const std::vector<FlightDump> dumps = frozen_inside_a_collective(90.0, 91.2);
  const FlightDiagnosis d = diagnose_flights(dumps);
  EXPECT_TRUE(d.frozen.empty());
  EXPECT_CONTAINS(format_diagnosis(dumps, d), "VERDICT no operation is waiting on a rank");
}

TEST(FlightAnalysis, UnscheduledStretchesAndStalenessSurviveTheDumpsJson) {
  const FlightDump d = frozen_inside_a_collective(100.0, 106.0)[2];
  const FlightDump back = parse_flight_dump(flight_dump_json(d), "test");
  EXPECT_EQ(back.unscheduled, d.unscheduled);
  EXPECT_EQ(back.stale_s, 6.0);
}

}  // namespace
}  // namespace megatrain
