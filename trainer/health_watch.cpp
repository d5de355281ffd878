#include "trainer/health_watch.h"

#include "health/fault_inject.h"
#include "health/ready_check.h"
#include "health/startup_times.h"
#include "parallel/comm_gather.h"
#include "parallel/flight_recorder.h"
#include "parallel/launch_env.h"

namespace megatrain {
namespace {

int node_of(const Comm& world) { return world.rank() / ranks_per_node_from_env(); }

// Every rank's host, gathered once after the roll call (with the watchdogs running, before their
// init timeout fires) for the detectors that name hosts.
std::vector<std::string> roll_call(const Config& cfg, const Comm& world, const FaultPlan& faults) {
  inject_at_step_start(faults, world.rank(), 0);
  wait_for_all_ranks(world, 0.9 * cfg.health.init_timeout_s);
  StartupTimes::instance().mark("roll call");
  return all_gather_text(world, host_name());
}

}  // namespace

// Before the watchdog starts: the flight recorder's size, and the init section entered.
Progress& HealthWatch::started(const Config& cfg, Progress& p) {
  FlightRecorder::instance().set_capacity(static_cast<size_t>(cfg.health.flight_recorder_entries));
  p.enter(Section::init, 0);
  return p;
}

HealthWatch::HealthWatch(const Config& cfg, const Comm& world, const FaultPlan& faults)
    : world_(world),
      watchdog_(cfg.health, started(cfg, progress_), world.rank(), host_name()),
      heartbeat_(cfg.health, progress_, world.rank(), node_of(world), host_name()),
      timeline_(cfg.health, world.rank(), host_name()),
      hosts_(roll_call(cfg, world, faults)),
      stragglers_(cfg.health, world, node_of(world), hosts_),
      links_(cfg.health, world, hosts_) {
  watchdog_.set_peers(gather_peer_addresses(world, hosts_, listener_));
}

void HealthWatch::begin(int64_t step) { progress_.enter(step == first_step_ ? Section::init : Section::step, step); }

void HealthWatch::end(const StepOutcome& out) {
  const double waited_ms = out.comm.waited_ms(), busy_ms = out.seconds * 1e3 - waited_ms;
  progress_.set_loss(out.loss);
  watchdog_.step_done(out.seconds, world_);
  stragglers_.step_done(out.step, busy_ms, waited_ms);
  links_.step_done(out.step);
  const double t_begin = std::chrono::duration<double>(out.began.time_since_epoch()).count();
  timeline_.step(out.step, t_begin, t_begin + out.seconds, busy_ms, waited_ms);
}

}  // namespace megatrain
