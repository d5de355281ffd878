// Heartbeats (docs/robustness.md R05): a thread per rank rewrites health.run_dir/hb/rank_R.json
// atomically every health.heartbeat_interval_s with where the rank is — step, section, operations
// completed (coll_seq), last loss, resident memory, its own interval (interval_s) — so a supervisor
// sees progress, not just liveness: a heartbeat that keeps coming while step and coll_seq stand still
// is a livelock. The beat written when the rank ends says "final": true.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "health/health_options.h"
#include "health/progress.h"

namespace megatrain {

class Heartbeat {
 public:
  // Starts the thread when run_dir is set and the interval is positive; `node` = the host's index.
  Heartbeat(const HealthOptions& opts, const Progress& progress, int rank, int node, std::string host);
  ~Heartbeat();  // writes a last beat
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  // `last`: the rank's final beat ("final": true), so that its age after the rank ends is no sign of a stall.
  void beat(bool last) const;

  const HealthOptions opts_;
  const Progress& progress_;
  const int rank_, node_;
  const std::string host_, path_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace megatrain
