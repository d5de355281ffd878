// The debug switches read from the environment, all declared here (DESIGN.md §2 point 11).
#pragma once
#include <cstdlib>
#include <cstring>

namespace megatrain::debug_env {

// MEGATRAIN_DEBUG_CRASH_BEFORE_RENAME=1: the process exits (code 42) after a checkpoint is fully
// written to its .tmp folder and before it is renamed — for testing crash safety.
inline bool crash_before_rename() {
  const char* v = std::getenv("MEGATRAIN_DEBUG_CRASH_BEFORE_RENAME");
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace megatrain::debug_env
