#include "health/startup_times.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace megatrain {

double seconds_since_process_start() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text;
  double up = 0.0;
  if (!std::getline(stat, text) || !(uptime >> up)) return 0.0;
  // Field 22, starttime in clock ticks since boot; the fields after the command name's ')'.
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  for (int i = 3; i < 22 && rest >> field; ++i) {
  }
  unsigned long long ticks = 0;
  if (!(rest >> ticks)) return 0.0;
  return up - static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

StartupTimes& StartupTimes::instance() {
  static StartupTimes t;
  return t;
}

void StartupTimes::mark(const std::string& name) { marks_.emplace_back(name, seconds_since_process_start()); }

std::string StartupTimes::summary() const {
  if (marks_.empty()) return "startup: nothing marked";
  std::string parts;
  double before = 0.0;
  for (const auto& [name, at] : marks_) {
    parts += fmt::format("{}{} {:.2f}", parts.empty() ? "" : ", ", name, at - before);
    before = at;
  }
  return fmt::format("startup {:.2f} s from process start to the end of step 1: {}", marks_.back().second, parts);
}

}  // namespace megatrain
