// A rank's flight-recorder dump, fr/rank_R.json: who wrote it, why, where the rank was, and its
// recent operations (parallel/flight_recorder.h). Written by the watchdog when it fires; read back
// by `megatrain diagnose` (health/flight_analysis.h). Times are seconds on the writing process's
// steady clock (comparable within one dump; `t_wall` places the dump in real time).
#pragma once
#include <string>
#include <vector>

#include "parallel/flight_recorder.h"

namespace megatrain {

// A peer as the dumping rank saw it when it dumped (health/reachability.h).
struct PeerStatus {
  int rank = 0;
  std::string host;
  std::string reach;  // health/reachability.h reach_name: "yes", "refused", "silent" or "unknown"
};

// A stretch in which the rank's watchdog thread was not scheduled: its clock jumped past its
// polling interval (a SIGSTOP, a paused VM or container, a host stall). Unix times.
struct Unscheduled {
  double from_wall = 0.0, to_wall = 0.0;
  double seconds() const { return to_wall - from_wall; }
  friend bool operator==(const Unscheduled&, const Unscheduled&) = default;
};

struct FlightDump {
  int rank = 0;
  std::string host;
  long pid = 0;
  std::string reason;   // "watchdog: …"
  std::string section;  // health/progress.h section_name
  long long step = 0;
  double t_wall = 0.0;  // Unix time of the dump
  double stale_s = 0.0; // how long the rank had made no progress when it dumped (0 in older dumps)
  std::vector<Unscheduled> unscheduled;  // the latest stretches, oldest first
  FlightSnapshot snapshot;
  std::vector<PeerStatus> peers;  // empty when not probed (or a dump from before probing existed)
};

std::string flight_dump_json(const FlightDump& d);
// The dump in `text`; a malformed one is a DataError naming `source`.
FlightDump parse_flight_dump(const std::string& text, const std::string& source);

// Writes `text` to `path` atomically (path.tmp, then rename), creating the folder; false when it
// cannot (the caller reports it — a dump must not turn a hang into a crash).
bool write_file_atomic(const std::string& path, const std::string& text);

}  // namespace megatrain
