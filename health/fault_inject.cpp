#include "health/fault_inject.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <limits>
#include <string>
#include <stop_token>
#include <thread>

#include "kernels/check.h"
#include "parallel/flight_recorder.h"

namespace megatrain {
namespace {

// hang how=freeze: a thread stops the process as soon as it sees a collective issued from here on
// still in flight — the rank has arrived, so its peers' records show it inside the operation with
// them (unless it had already received everything it needed: then the peers go on to the next
// collective, and wait there). A function-local static, so it ends (at exit) before the recorder.
void freeze_inside_a_collective(const Fault& f, int rank, int64_t step) {
  const FlightSnapshot at = FlightRecorder::instance().snapshot();
  const int64_t first_id = at.records.empty() ? 0 : at.records.back().id + 1;
  static std::jthread freezer;
  freezer = std::jthread([&f, rank, step, first_id](const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const FlightSnapshot s = FlightRecorder::instance().snapshot();
      for (const FlightRecord& r : s.records)
        if (r.id >= first_id && r.peer < 0 && r.state == FlightState::in_flight) {
          log_injection(f, rank, step,
                        fmt::format("how=freeze inside {} group '{}' seq={}", r.op,
                                    s.groups[static_cast<size_t>(r.group)].name, r.seq));
          std::raise(SIGSTOP);  // stops every thread of the process
          return;
        }
    }
  });
}

}  // namespace

void inject_at_step_start(const FaultPlan& plan, int rank, int64_t step) {
  if (const Fault* f = plan.find(FaultKind::slow, rank, step)) {
    static const Fault* logged = nullptr;  // logged at its first step only: it repeats every step
    if (f->every > 1)
      log_injection(*f, rank, step, fmt::format("ms={} every {} steps", f->ms, f->every));
    else if (f != logged)
      log_injection(*f, rank, step,
                    f->last_step == std::numeric_limits<int64_t>::max()
                        ? fmt::format("ms={} every step from here", f->ms)
                        : fmt::format("ms={} every step to step {}", f->ms, f->last_step));
    logged = f;
    std::this_thread::sleep_for(std::chrono::milliseconds(f->ms));
  }
  if (const Fault* f = plan.find(FaultKind::kill, rank, step)) {
    log_injection(*f, rank, step, fmt::format("sig={}", f->sig));
    std::raise(f->sig);
  }
  if (const Fault* f = plan.find(FaultKind::exc, rank, step); f && f->detail.empty()) {
    log_injection(*f, rank, step);
    throw Error(fmt::format("injected exception (MEGATRAIN_FAULT) at rank={} step={}", rank, step));
  }
  if (const Fault* f = plan.find(FaultKind::hang, rank, step)) {
    if (f->detail == "freeze") return freeze_inside_a_collective(*f, rank, step);
    log_injection(*f, rank, step, "how=" + f->detail);
    if (f->detail == "sigstop") std::raise(SIGSTOP);
    if (f->detail == "spin") {
      std::atomic<uint64_t> spins{0};  // a live process that makes no progress
      for (;;) spins.fetch_add(1, std::memory_order_relaxed);
    }
    for (;;) pause();  // sleep, and what is left after SIGCONT
  }
}

void inject_extra_collective(const FaultPlan& plan, const Comm& world, int64_t step) {
  const Fault* f = plan.find(FaultKind::exc, world.rank(), step);
  if (!f || f->detail != "extra_collective") return;
  log_injection(*f, world.rank(), step, "extra_collective=1");
  std::array<int32_t, 3> x{};
  world.all_reduce(x.data(), static_cast<int64_t>(x.size())).wait();
}

void inject_checkpoint_crash(const FaultPlan& plan, int rank, int64_t step, const char* phase) {
  const Fault* f = plan.find(FaultKind::ckpt_crash, rank, step);
  if (!f || f->detail != phase) return;
  log_injection(*f, rank, step, std::string("phase=") + phase);
  std::raise(SIGKILL);
}

void inject_checkpoint_delay(const FaultPlan& plan, int rank, int64_t step) {
  if (const Fault* f = plan.find(FaultKind::ckpt_slow, rank, step)) {
    log_injection(*f, rank, step, fmt::format("ms={}", f->ms));
    std::this_thread::sleep_for(std::chrono::milliseconds(f->ms));
  }
}

}  // namespace megatrain
