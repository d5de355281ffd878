#include "trainer/stop_request.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <csignal>
#include <ctime>
#include <exception>

namespace megatrain {
namespace {

volatile std::sig_atomic_t g_signal = 0;  // the first stop signal received, 0 = none

extern "C" void on_stop_signal(int sig) {
  if (g_signal == 0) g_signal = sig;
}

struct sigaction g_previous_usr1, g_previous_term;

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  return set;
}

// A held stop signal, taken (it is no longer pending); 0 when none is.
int take_held_stop_signal() {
  const sigset_t set = stop_signals();
  const timespec now{};
  const int sig = sigtimedwait(&set, nullptr, &now);
  return sig > 0 ? sig : 0;
}

}  // namespace

void hold_stop_signals() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

StopSignals::StopSignals() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // system calls the signal interrupts (file writes, MPI's) resume
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &g_previous_usr1);
  sigaction(SIGTERM, &sa, &g_previous_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

int StopSignals::first() const {
  if (g_signal == 0) g_signal = take_held_stop_signal();
  return g_signal;
}

StopRequests::StopRequests(const Config& cfg, const Comm& world)
    : cfg_(cfg), world_(world), start_(std::chrono::steady_clock::now()) {}

StopRequests::~StopRequests() {
  // Agreements in flight write into pending_: wait for them, unless an error unwinds (the job ends).
  if (std::uncaught_exceptions() == 0)
    for (const Pending& p : pending_) p.work.wait();
}

std::string StopRequests::agree(int64_t steps_this_run) {
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() / 60.0;
  const TrainConfig& t = cfg_.train;
  const int64_t steps_done = t.exit_after_steps > 0 && steps_this_run >= t.exit_after_steps ? 1 : 0;
  Pending& p = pending_.emplace_back();
  p.why = {signals_.first(), t.exit_duration_mins > 0 && minutes >= t.exit_duration_mins ? 1 : 0, steps_done};
  p.work = world_.all_reduce(p.why.data(), 3, ReduceOp::max);
  std::array<int64_t, 3> why{0, 0, steps_done};
  if (pending_.size() > static_cast<size_t>(cfg_.parallel.max_staleness)) {
    pending_.front().work.wait();
    why = pending_.front().why;
    why[2] = std::max(why[2], steps_done);
    pending_.pop_front();
  }
  if (why[0] != 0) return fmt::format("signal {}", why[0] == SIGUSR1 ? "SIGUSR1" : why[0] == SIGTERM ? "SIGTERM" : "?");
  if (why[1] != 0) return fmt::format("train.exit_duration_mins = {}", t.exit_duration_mins);
  if (why[2] != 0) return fmt::format("train.exit_after_steps = {}", t.exit_after_steps);
  return "";
}

}  // namespace megatrain
