// Per-rank timelines (docs/robustness.md R15; MegaScale's trace mode): with health.timeline = true each
// rank appends Chrome-trace events (the JSON array format, which needs no closing bracket, so a
// crashed run's file still loads) to RUN_DIR/timeline/rank_R.trace.json: one span per step
// (compute and wait times in its arguments) and one per communication operation, on a lane per
// process group, at Unix-epoch microseconds so ranks on different hosts line up. Events are
// buffered and written every 16 steps and at the end. `megatrain trace merge RUN_DIR`
// (trace_merge.h) joins the ranks into one file that chrome://tracing or ui.perfetto.dev opens.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

#include "health/health_options.h"

namespace megatrain {

class Timeline {
 public:
  // Off unless opts.timeline and opts.run_dir are set.
  Timeline(const HealthOptions& opts, int rank, const std::string& host);
  ~Timeline();  // flushes
  // A step that ran from `t_begin` to `t_end` (steady-clock seconds), and the communication that
  // ended since the last call.
  void step(int64_t step, double t_begin, double t_end, double compute_ms, double wait_ms);

 private:
  void flush();

  bool on_ = false;
  int rank_ = 0;
  double wall_minus_steady_ = 0.0;  // seconds
  int64_t next_op_ = 0;
  std::string buffer_;
  std::ofstream out_;
  int steps_ = 0;
};

}  // namespace megatrain
