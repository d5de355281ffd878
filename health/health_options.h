// The [health] config section: where a run keeps its health records, and the watchdog's,
// heartbeat's and flight recorder's settings (README "When things go wrong").
#pragma once
#include <cstdint>
#include <string>

namespace megatrain {

struct HealthOptions {
  // Folder for hb/rank_R.json (heartbeats), fr/rank_R.json (flight-recorder dumps) and reports/;
  // "" = none (a watchdog that fires still prints its diagnosis).
  std::string run_dir;
  bool watchdog = true;
  double init_timeout_s = 600.0;        // start-up until the first step has ended
  double step_timeout_floor_s = 60.0;   // the calibrated step timeout is at least this
  double step_timeout_factor = 5.0;     // … and this many times the slowest step seen while calibrating
  int calibrate_steps = 5;              // steps observed before calibrating (until then: init_timeout_s)
  double io_timeout_s = 1800.0;         // checkpoint saves and validation
  double heartbeat_interval_s = 1.0;    // hb/rank_R.json rewritten this often (needs run_dir); 0 = off
  int flight_recorder_entries = 2000;   // operations kept per process
  bool timeline = false;                // per-rank Chrome traces in run_dir/timeline (health/timeline.h)
  // Straggler detection (health/straggler.h).
  int straggler_window = 50;            // steps per scoring window; 0 = off
  double straggler_threshold = 0.7;     // a score below this is slow
  double straggler_min_ms = 5.0;        // … when the median also exceeds the reference by this much
  int straggler_windows = 2;            // … for this many windows in a row
  double slow_step_factor = 3.0;        // SLOW_STEP: a step this many times its rank's median (and ≥ 10 × min_ms more)
  int64_t link_check_interval = 100;    // steps between probes of the ranks' links (health/link_monitor.h); 0 = off
  // Loss spikes (health/loss_spikes.h).
  double spike_factor = 10.0;           // a loss this many times the window's median is a spike; 0 = off
  int spike_window = 100;               // accepted losses the median is taken over
  std::string on_spike = "warn";        // "warn" | "skip" (the update) | "rollback" (trainer/train.cpp roll_back)
  int64_t spike_skip_batches = 100;     // rollback: global batches skipped past the checkpoint's data position
  int spike_max_rollbacks = 3;          // rollback: at most this many per run (the loader reserves their batches)
  int64_t replica_check_interval = 1000;  // steps between data-parallel replica hash checks (trainer/replica_check.h); 0 = off
  friend bool operator==(const HealthOptions&, const HealthOptions&) = default;
};

// The global batches the training loader holds beyond train.steps, for rollbacks' skips.
inline int64_t batches_reserved_for_rollbacks(const HealthOptions& h) {
  return h.on_spike == "rollback" ? h.spike_skip_batches * h.spike_max_rollbacks : 0;
}

}  // namespace megatrain
