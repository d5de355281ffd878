#include "health/ready_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <thread>
#include <vector>

namespace megatrain {

void wait_for_all_ranks(const Comm& world, double timeout_s) {
  const int p = world.size(), tag = world.max_tag();
  if (p == 1) return;
  int go = 1;
  if (world.rank() != 0) {
    static const uint8_t ready = 1;
    world.send(&ready, 1, 0, tag).wait();
    world.broadcast(&go, 1, 0).wait();
    return;
  }
  std::vector<uint8_t> flags(static_cast<size_t>(p), 0);
  std::vector<Work> calls;
  for (int r = 1; r < p; ++r) calls.push_back(world.recv(&flags[static_cast<size_t>(r)], 1, r, tag));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    std::vector<int> missing;
    for (int r = 1; r < p; ++r)
      if (!calls[static_cast<size_t>(r - 1)].done()) missing.push_back(r);
    if (missing.empty()) break;
    if (std::chrono::steady_clock::now() > deadline)
      throw CommError(fmt::format("INIT_TIMEOUT missing ranks=[{}] after {:g} s: they did not reach the start of "
                                  "training (stuck in start-up, I/O or stopped); health.init_timeout_s sets the wait",
                                  fmt::join(missing, ","), timeout_s));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const Work& w : calls) w.wait();
  world.broadcast(&go, 1, 0).wait();
}

}  // namespace megatrain
