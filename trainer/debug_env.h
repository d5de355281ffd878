// The debug switches read from the environment, all declared here (DESIGN.md §2 point 11).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace megatrain::debug_env {

// MEGATRAIN_DEBUG_CRASH_BEFORE_RENAME=1: the process exits (code 42) after a checkpoint is fully
// written to its .tmp folder and before it is renamed — for testing crash safety.
inline bool crash_before_rename() {
  const char* v = std::getenv("MEGATRAIN_DEBUG_CRASH_BEFORE_RENAME");
  return v && std::strcmp(v, "1") == 0;
}

// MEGATRAIN_DEBUG_GRAD_OVERFLOW=STEP[,STEP…][@RANK]: at those steps (numbered from 1, as logged)
// global rank RANK (default 0) sets the first gradient it reduces to +Inf after backward — an
// injected overflow for testing fp16 loss scaling and non-finite step skipping.
inline bool grad_overflow_injected(int64_t step, int rank) {
  const char* v = std::getenv("MEGATRAIN_DEBUG_GRAD_OVERFLOW");
  if (!v) return false;
  const std::string s(v);
  const size_t at = s.find('@');
  if (at != std::string::npos && std::stoi(s.substr(at + 1)) != rank) return false;
  if (at == std::string::npos && rank != 0) return false;
  const std::string steps = s.substr(0, at);
  for (size_t pos = 0; pos < steps.size();) {
    const size_t comma = std::min(steps.find(',', pos), steps.size());
    if (std::stoll(steps.substr(pos, comma - pos)) == step) return true;
    pos = comma + 1;
  }
  return false;
}

}  // namespace megatrain::debug_env
