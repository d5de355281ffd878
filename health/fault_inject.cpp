#include "health/fault_inject.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <limits>
#include <string>
#include <thread>

#include "kernels/check.h"

namespace megatrain {

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
