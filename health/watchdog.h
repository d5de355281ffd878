// The per-rank hang watchdog (docs/robustness.md R01; nvrx's rank monitor, PyTorch's NCCL watchdog).
// A thread checks how long ago this rank last made progress — entered a section or step
// (health/progress.h), or issued or completed a communication operation (the flight recorder) —
// against the current section's timeout:
//   init        health.init_timeout_s, until the first step has ended; also for steps until calibrated
//   step        max(step_timeout_floor_s, step_timeout_factor × the slowest of the first
//               calibrate_steps steps on any rank), agreed by one all-reduce so every rank has the same
//   eval, checkpoint   health.io_timeout_s
// When it is exceeded the rank tries a connection to every peer (at most 1 s; health/reachability.h),
// prints one line on stderr,
//   WATCHDOG rank=R host=H section=S step=N coll_seq=K timeout=Ts stale_for=Xs in_flight=… dump=…
//            [unreachable=[ranks]]
// writes its flight-recorder dump (health.run_dir/fr/rank_R.json), waits half a second so that
// its peers, stuck on the same operation, dump too, and exits with kExitHang (75) without
// unwinding — a hung collective cannot be cancelled. The hung rank itself, if stopped, writes
// nothing: the diagnosis (`megatrain diagnose`) works from the negative evidence.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

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
  // The peers to try to connect to when it fires (health/reachability.h); none until set.
  void set_peers(std::vector<PeerAddress> peers);

 private:
  double timeout(Section s) const;
  void run();
  [[noreturn]] void fire(Section s, double stale, double limit);

  const HealthOptions opts_;
  const Progress& progress_;
  const int rank_;
  const std::string host_;
  int steps_seen_ = 0;
  double slowest_ = 0.0;
  std::atomic<double> step_timeout_{0.0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<PeerAddress> peers_;
  std::thread thread_;
};

}  // namespace megatrain
