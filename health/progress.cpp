#include "health/progress.h"

#include <algorithm>

#include "parallel/flight_recorder.h"

namespace megatrain {

const char* section_name(Section s) {
  switch (s) {
    case Section::init: return "init";
    case Section::step: return "step";
    case Section::eval: return "eval";
    case Section::checkpoint: return "checkpoint";
  }
  return "?";
}

void Progress::enter(Section s, int64_t step) {
  section_.store(s, std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
  touched_.store(FlightRecorder::now(), std::memory_order_relaxed);
}

double Progress::last_progress() const {
  return std::max(touched_.load(std::memory_order_relaxed), FlightRecorder::instance().last_activity());
}

}  // namespace megatrain
