// Straggler detection, always on (docs/robustness.md R12–R14; MegaScale's heat map, nvrx's straggler
// scores). Every step each rank measures its compute time — the step's wall time minus the time it
// spent blocked in communication — and its wait time. Every health.straggler_window steps the ranks
// gather both (one all-gather) and every rank scores the window alike:
//   relative score   = the fastest rank's median compute ÷ this rank's median compute;
//   individual score = this rank's usual best (the lower quartile of its past window medians) ÷ its
//                      median now (it got slower than itself);
//   last arrival     = the fraction of the window's steps in which this rank waited least (it was
//                      the one the others waited for).
// A rank is reported when a score stays below health.straggler_threshold for
// health.straggler_windows windows in a row and its median exceeds the reference by at least
// health.straggler_min_ms (an absolute floor against timing noise on small steps):
//   STRAGGLER rank=3 host=h node=1 section=compute score=0.09 median=221.4ms best=20.1ms last_arrival=1.00 windows=2
//   INDIVIDUAL_DEGRADATION rank=0 host=h node=0 section=compute score=0.33 median=61.0ms best=20.3ms windows=2
// A single step far slower than its rank's window median is an event, not a straggler:
//   SLOW_STEP step=30 rank=1 compute=318.0ms median=20.4ms
// Every line also goes to health.run_dir/reports/straggler.jsonl as JSON.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "health/health_options.h"
#include "parallel/comm.h"

namespace megatrain {

struct StragglerReport {
  std::string kind;  // "STRAGGLER", "INDIVIDUAL_DEGRADATION" or "SLOW_STEP"
  int rank = 0;
  int64_t step = 0;         // the window's last step (SLOW_STEP: the step)
  double score = 1.0;       // STRAGGLER: relative; INDIVIDUAL_DEGRADATION: individual
  double median_ms = 0.0;   // this rank's window median
  double best_ms = 0.0;     // the reference: the fastest rank's median, or this rank's usual best
  double step_ms = 0.0;     // SLOW_STEP: that step's compute
  double last_arrival = 0.0;
  int windows = 0;          // consecutive windows below the threshold
};

// The scoring alone, without communication (unit-testable): feed it each window's times.
class StragglerScorer {
 public:
  StragglerScorer(const HealthOptions& opts, int ranks);
  // compute_ms[r][i], wait_ms[r][i]: rank r's i-th step of the window, which ends at `last_step`.
  std::vector<StragglerReport> add_window(int64_t last_step, const std::vector<std::vector<double>>& compute_ms,
                                          const std::vector<std::vector<double>>& wait_ms);

 private:
  HealthOptions opts_;
  std::vector<std::vector<double>> history_;       // per rank, its window medians so far
  std::vector<int> relative_run_, individual_run_;  // consecutive windows below the threshold
};

class StragglerDetector {
 public:
  // Off when health.straggler_window is 0. `node`: this rank's host index; `hosts`: every rank's host.
  StragglerDetector(const HealthOptions& opts, const Comm& world, int node, std::vector<std::string> hosts);
  // After every step on every rank (collective at each window's end). Rank 0 logs the reports.
  void step_done(int64_t step, double compute_ms, double wait_ms);

 private:
  void report(const StragglerReport& r, const std::vector<int32_t>& nodes, const std::vector<std::string>& hosts);

  HealthOptions opts_;
  Comm world_;
  StragglerScorer scorer_;
  std::vector<double> compute_, wait_;  // this window's, this rank's
  std::vector<int32_t> nodes_;
  std::vector<std::string> hosts_;
  std::ofstream jsonl_;
};

}  // namespace megatrain
