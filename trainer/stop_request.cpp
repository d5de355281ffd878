#include "trainer/stop_request.h"

#include <fmt/format.h>

#include <csignal>

namespace megatrain {
namespace {

volatile std::sig_atomic_t g_signal = 0;  // the first stop signal received, 0 = none

extern "C" void on_stop_signal(int sig) {
  if (g_signal == 0) g_signal = sig;
}

struct sigaction g_previous_usr1, g_previous_term;

}  // namespace

StopRequests::StopRequests(const Config& cfg, const Comm& world)
    : cfg_(cfg), world_(world), start_(std::chrono::steady_clock::now()) {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // system calls the signal interrupts (file writes, MPI's) resume
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &g_previous_usr1);
  sigaction(SIGTERM, &sa, &g_previous_term);
}

StopRequests::~StopRequests() {
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

std::string StopRequests::agree(int64_t steps_this_run) {
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() / 60.0;
  const TrainConfig& t = cfg_.train;
  int64_t why[3] = {g_signal, t.exit_duration_mins > 0 && minutes >= t.exit_duration_mins ? 1 : 0,
                    t.exit_after_steps > 0 && steps_this_run >= t.exit_after_steps ? 1 : 0};
  world_.all_reduce(why, 3, ReduceOp::max).wait();
  if (why[0] != 0) return fmt::format("signal {}", why[0] == SIGUSR1 ? "SIGUSR1" : why[0] == SIGTERM ? "SIGTERM" : "?");
  if (why[1] != 0) return fmt::format("train.exit_duration_mins = {}", t.exit_duration_mins);
  if (why[2] != 0) return fmt::format("train.exit_after_steps = {}", t.exit_after_steps);
  return "";
}

}  // namespace megatrain
