// The per-rank hang watchdog (docs/robustness.md R01; nvrx's rank monitor, PyTorch's NCCL watchdog).
// A thread checks how long ago this rank last made progress — entered a section or step
// (health/progress.h), or issued or completed a communication operation (the flight recorder) —
// against the current section's timeout:
//   init        health.init_timeout_s until training starts; the first step, when its time is
//               predicted (expect_first_step: its model FLOPs at the measured GEMM peak), gets
//               max(step_timeout_floor_s, kFirstStepMinS, kFirstStepSlack × step_timeout_factor ×
//               the prediction), at most init_timeout_s
//   step        max(step_timeout_floor_s, step_timeout_factor × the slowest of the first
//               calibrate_steps steps on any rank), agreed by one all-reduce so every rank has the same;
//               until then the same rule over the steps this rank has seen (the ranks' figures
//               differ only by their clocks, as a step ends on every rank together)
//   eval, checkpoint   health.io_timeout_s
// When it is exceeded the rank tries a connection to every peer (at most 1 s; health/reachability.h),
// prints one line on stderr,
//   WATCHDOG rank=R host=H section=S step=N coll_seq=K timeout=Ts stale_for=Xs in_flight=… dump=…
//            [unreachable=[ranks]]
// writes its flight-recorder dump (health.run_dir/fr/rank_R.json), waits half a second so that
// its peers, stuck on the same operation, dump too, and exits with kExitHang (75) without
// unwinding — a hung collective cannot be cancelled. The hung rank itself, if stopped, writes
// nothing: the diagnosis (`megatrain diagnose`) works from the negative evidence.
//
// [Note: frozen rank] The thread wakes at least once a second; when its clock has jumped
// kUnscheduledS past the wake-up it asked for, the process was not scheduled (SIGSTOP, a paused VM
// or container, a host stall). It keeps the stretch, writes its dump at once (the job, whose other
// ranks' watchdogs may have fired while it was stopped, can be torn down before this rank's own
// timeout passes; the rank goes on), prints `UNSCHEDULED rank=R host=H for=Xs from=T0 to=T1
// dump=…`, and when the stretch outlasted the section's timeout fires at once, without probing its
// peers. A rank frozen inside a collective looks to every peer as arrived: only its own dump tells.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "health/flight_dump.h"
#include "health/health_options.h"
#include "health/progress.h"
#include "health/reachability.h"
#include "parallel/comm.h"

namespace megatrain {

class Watchdog {
 public:
  // Starts the thread when opts.watchdog.
  Watchdog(const HealthOptions& opts, const Progress& progress, int rank, std::string host);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // After each training step, on every rank: the step's duration. After calibrate_steps steps the
  // ranks agree on the step timeout (an all-reduce over `world`, collective) and rank 0 logs it.
  void step_done(double seconds, const Comm& world);
  double step_timeout() const;  // 0 until calibrated
  // The first step's predicted duration (0: none; the first step then has init_timeout_s).
  void expect_first_step(double seconds);
  static constexpr double kFirstStepMinS = 5.0, kFirstStepSlack = 4.0, kUnscheduledS = 1.0;
  // The peers to try to connect to when it fires (health/reachability.h); none until set.
  void set_peers(std::vector<PeerAddress> peers);

 private:
  double timeout(Section s) const;
  void run();
  // Keeps the stretch from `wall_from` + `asked_s` (the wake-up asked for) to now, writes the dump
  // (the job may end before this rank's own timeout) and prints UNSCHEDULED.
  void note_unscheduled(double asked_s, double wall_from, Section s, double stale);
  FlightDump dump(Section s, double stale) const;  // reason left to the caller
  std::string write(const FlightDump& d) const;     // the dump's path, or why there is none
  [[noreturn]] void fire(Section s, double stale, double limit, bool probe);

  const HealthOptions opts_;
  const Progress& progress_;
  const int rank_;
  const std::string host_;
  int steps_seen_ = 0;
  double slowest_ = 0.0;
  std::atomic<double> step_timeout_{0.0};
  std::atomic<double> provisional_{0.0};  // before calibration, after this rank's first step
  std::atomic<double> first_step_{0.0};   // the first step's, when predicted
  std::vector<Unscheduled> unscheduled_;  // the latest kKeptStretches, oldest first (under mu_)
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<PeerAddress> peers_;
  std::thread thread_;
};

}  // namespace megatrain
