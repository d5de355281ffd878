// The debug switches read from the environment, all declared here (DESIGN.md §2 point 11).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/check.h"

namespace megatrain::debug_env {

// MEGATRAIN_DEBUG_CRASH_BEFORE_RENAME=1: the process exits (code 42) after a checkpoint is fully
// written to its .tmp folder and before it is renamed — for testing crash safety.
inline bool crash_before_rename() {
  const char* v = std::getenv("MEGATRAIN_DEBUG_CRASH_BEFORE_RENAME");
  return v && std::strcmp(v, "1") == 0;
}

// MEGATRAIN_DEBUG_GRAD_OVERFLOW=STEP[,STEP…][@RANK]: at those steps (numbered from 1, as logged)
// global rank RANK (default 0) sets the first gradient it reduces to +Inf after backward — an
// injected overflow for testing fp16 loss scaling and non-finite step skipping. Read once; a value
// of another form is an InputError.
inline bool grad_overflow_injected(int64_t step, int rank) {
  struct Plan {
    int rank = 0;
    std::vector<int64_t> steps;
  };
  static const Plan plan = [] {
    Plan p;
    const char* v = std::getenv("MEGATRAIN_DEBUG_GRAD_OVERFLOW");
    if (!v) return p;
    const std::string s(v);
    const auto number = [&](const std::string& text) {
      size_t used = 0;
      int64_t n = -1;
      try {
        n = std::stoll(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      MT_INPUT_CHECK(used == text.size() && n >= 0, "MEGATRAIN_DEBUG_GRAD_OVERFLOW = \"{}\": expected STEP[,STEP...][@RANK] "
                     "with non-negative integers, e.g. \"4\" or \"7,8@1\"", s);
      return n;
    };
    const size_t at = s.find('@');
    if (at != std::string::npos) p.rank = static_cast<int>(number(s.substr(at + 1)));
    const std::string steps = s.substr(0, at);
    for (size_t pos = 0; pos <= steps.size();) {
      const size_t comma = std::min(steps.find(',', pos), steps.size());
      p.steps.push_back(number(steps.substr(pos, comma - pos)));
      pos = comma + 1;
    }
    return p;
  }();
  return rank == plan.rank && std::find(plan.steps.begin(), plan.steps.end(), step) != plan.steps.end();
}

}  // namespace megatrain::debug_env
