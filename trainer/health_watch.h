// The run's health, from before the model is built to the end: the flight recorder's size, the
// watchdog and heartbeat (whose progress the step loop moves), the timeline, a roll call of every
// rank, the straggler detector and the link monitor (which name hosts), and the listener the
// peers' watchdogs reach (docs/robustness.md R01–R16). As a step observer it moves the progress
// through the steps and hands each step's time and waits to the detectors.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "health/fault_plan.h"
#include "health/heartbeat.h"
#include "health/link_monitor.h"
#include "health/progress.h"
#include "health/reachability.h"
#include "health/straggler.h"
#include "health/timeline.h"
#include "health/watchdog.h"
#include "trainer/step_observer.h"

namespace megatrain {

class HealthWatch final : public StepObserver {
 public:
  // Collective over `world` (the roll call, the hosts); `faults`' step-0 faults strike after the
  // watchdog starts and before the roll call.
  HealthWatch(const Config& cfg, const Comm& world, const FaultPlan& faults);
  Progress& progress() { return progress_; }
  // The first step this run trains (numbered from 1) ends the init section.
  void set_first_step(int64_t step) { first_step_ = step; }
  // Its predicted duration, for the watchdog's first-step timeout (health/watchdog.h).
  void expect_first_step(double seconds) { watchdog_.expect_first_step(seconds); }

  void begin(int64_t step) override;
  void end(const StepOutcome& out) override;

 private:
  static Progress& started(const Config& cfg, Progress& p);

  const Comm& world_;
  Progress progress_;
  Watchdog watchdog_;
  Heartbeat heartbeat_;
  Timeline timeline_;
  std::vector<std::string> hosts_;
  StragglerDetector stragglers_;
  LinkMonitor links_;
  const PeerListener listener_;  // what peers' watchdogs connect to
  int64_t first_step_ = 1;
};

}  // namespace megatrain
