// Start-up time (docs/robustness.md R24; MegaScale: fast initialisation is what makes a restart
// fast). The process marks the end of each start-up phase; after the first step rank 0 logs
//   startup 1.21 s from process start to the end of step 1: process start → MPI init 0.31, config 0.02,
//   roll call 0.01, model and data 0.12, checkpoint load 0.40, first step 0.35
// Times are measured from the process's start (its exec, as /proc/self/stat gives it), so what
// happens before main — loading the shared libraries — counts too. One per process.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace megatrain {

class StartupTimes {
 public:
  static StartupTimes& instance();
  // Seconds since the process started, now; marks the end of phase `name`.
  void mark(const std::string& name);
  // "startup 1.21 s from process start to the end of step 1: …" (the phases in the order marked).
  std::string summary() const;
  const std::vector<std::pair<std::string, double>>& marks() const { return marks_; }

 private:
  std::vector<std::pair<std::string, double>> marks_;  // phase → seconds since process start at its end
};

// Seconds since this process started (from /proc; 0 when it cannot be read).
double seconds_since_process_start();

}  // namespace megatrain
