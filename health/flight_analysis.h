// Lining up the ranks' flight-recorder dumps (docs/robustness.md R02; what PyTorch's fr_trace does):
// which operation the job hung on and which rank(s) never arrived, and where ranks issued different
// operations under the same number (a desync).
//
// A group is known by its name and members. Hang: in each group, the lowest collective number K
// still in flight on some member that dumped; a member did not arrive when its dump's last
// collective in that group is below K, or when it left no dump (a stopped or killed rank writes
// none: the evidence is negative, MegaScale §5.2). For an in-flight send or receive, the peer did
// not arrive when its dump lacks the matching receive or send (the k-th of each between the two).
// The ranks named as not arrived are those waited on that wait on nobody themselves (a rank blocked
// behind a stuck rank of another group is a victim, not a cause); in a cycle, all waited on.
// Desync: at the same (group, K), members recorded a different operation, element type or count
// (all_to_all counts differ by design and are not compared); or two ranks wait for each other in
// two different collectives (they issued collectives in different orders); the rank(s) in the most
// such pairs are named, as an extra collective on one rank makes it pair with every rank it waits
// for.
// Unreachable: a host every dump from another host's rank found silent (no answer, not even a
// refusal) in every one of its ranks (the watchdogs' connection attempts, health/reachability.h): a link down or a host gone,
// where every live rank may be inside the same collective and none is "missing".
// Frozen: a rank whose dump records a stretch in which it was not scheduled (health/watchdog.h
// [Note: frozen rank]) that overlaps another dump's wait (from its last progress to its dump): it
// was stopped while its peers waited — inside a collective with them, where no one is "missing".
#pragma once
#include <set>
#include <string>
#include <vector>

#include "health/flight_dump.h"

namespace megatrain {

struct FlightDiagnosis {
  std::vector<int> without_dump;  // world ranks that left no dump
  std::set<int> not_arrived;      // where the hang starts
  std::vector<std::string> hangs;     // "seq=271 all_reduce group 'dp' [0,1,2,3] missing ranks: {1}"
  std::vector<std::string> desyncs;   // "group 'world' [0,1] seq=15: rank 0 all_reduce 3 x i64, rank 1 …"
  std::vector<std::string> unreachable_hosts;  // no rank on another host could connect to any of its ranks
  std::set<int> out_of_order;     // the rank(s) in the most pairs of ranks waiting for each other
  std::set<int> frozen;           // not scheduled while their peers waited
  std::vector<std::string> frozen_lines;  // "rank 2 host h: not scheduled for 6.3 s (…) while rank(s) {0,1,3} waited"
  bool named_cause() const {
    return !not_arrived.empty() || !desyncs.empty() || !unreachable_hosts.empty() || !frozen.empty();
  }
};

FlightDiagnosis diagnose_flights(const std::vector<FlightDump>& dumps);

// The report `megatrain diagnose` prints: one line per dump, then the hangs and desyncs, then
// `VERDICT …`.
std::string format_diagnosis(const std::vector<FlightDump>& dumps, const FlightDiagnosis& d);

}  // namespace megatrain
