// Every rank's copy of one small value or one text — the all-gathers the health checks and
// the config agreement make to let each rank see what every rank has. Collective over `comm`.
#pragma once
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace megatrain {

template <class T>
std::vector<T> all_gather_value(const Comm& comm, T x) {
  const auto p = static_cast<size_t>(comm.size());
  std::vector<T> all(p);
  comm.all_gather(all.data(), &x, std::vector<int64_t>(p, 1)).wait();
  return all;
}

// Each rank's `text`, whole (its length first, then the bytes): a host's inventory of memory
// snapshots (trainer/memory_recovery.h) grows with its ranks and the sets it keeps.
std::vector<std::string> all_gather_text(const Comm& comm, const std::string& text);

}  // namespace megatrain
