// Where a rank is in its run — section, step, last loss — written by the training loop and read by
// the watchdog and heartbeat threads (lock-free). Progress is also any communication the flight
// recorder sees (parallel/flight_recorder.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <limits>

namespace megatrain {

enum class Section { init, step, eval, checkpoint };
const char* section_name(Section s);

class Progress {
 public:
  // Entering a section, or the start of a step, is progress.
  void enter(Section s, int64_t step);
  void set_loss(double loss) { loss_.store(loss, std::memory_order_relaxed); }

  Section section() const { return section_.load(std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  double loss() const { return loss_.load(std::memory_order_relaxed); }
  // Steady-clock seconds of the latest progress: the loop's or the flight recorder's.
  double last_progress() const;

 private:
  std::atomic<Section> section_{Section::init};
  std::atomic<int64_t> step_{0};
  std::atomic<double> loss_{std::numeric_limits<double>::quiet_NaN()};
  std::atomic<double> touched_{0.0};
};

}  // namespace megatrain
