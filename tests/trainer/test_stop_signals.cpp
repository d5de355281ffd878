// Held stop signals (trainer/stop_request.h [Note: held stop signals]): SIGUSR1 sent to the process
// every 20 µs while CPU matmuls run — oneDNN's JIT f32 GEMM, whose kernels point the stack pointer
// into the heap — interrupts none of them: the signal waits, held, and is taken after the work, and
// every product is right. Without the hold the handler's frames land in the heap and the process
// aborts in free() (or SIGSEGVs) within a few GEMMs. Each case runs in a child process (a death
// test), so a corrupted heap fails only that case.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "trainer/stop_request.h"

namespace megatrain {
namespace {

// 300 GEMMs of 256 × 256 × 256 (as many heap workspaces) under a stream of SIGUSR1; exits 0 when every
// product is right and the held signal is then taken, printing which.
[[noreturn]] void gemms_under_stop_signals() {
  hold_stop_signals();  // as megatrain's main does for `train`, before any thread starts
  const StopSignals signals;
  const int64_t n = 256;
  const std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f);
  std::vector<float> c(n * n);
  std::atomic<bool> done{false};
  std::thread sender([&] {
    while (!done) {
      kill(getpid(), SIGUSR1);
      usleep(20);
    }
  });
  bool right = true;
  for (int i = 0; i < 300; ++i) {
    cpu::gemm(cpu::Trans::no, cpu::Trans::no, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    right = right && c[0] == 0.125f * n && c[n * n - 1] == 0.125f * n;
    std::vector<char> other(1000 + 17 * i, 1);  // heap traffic beside the workspaces
    right = right && other.back() == 1;
  }
  done = true;
  sender.join();
  std::fprintf(stderr, "products %s; taken: %s\n", right ? "right" : "WRONG",
               signals.first() == SIGUSR1 ? "SIGUSR1" : "none");
  std::exit(right ? 0 : 1);
}

TEST(StopSignals, AHeldStopSignalInterruptsNoGemmAndIsTakenAfterIt) {
  EXPECT_EXIT(gemms_under_stop_signals(), testing::ExitedWithCode(0), "products right; taken: SIGUSR1");
}

}  // namespace
}  // namespace megatrain
