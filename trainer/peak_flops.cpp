#include "trainer/peak_flops.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/ops.h"

namespace megatrain {

double peak_clock_seconds(PeakClock clock) {
  if (clock == PeakClock::wall)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec)) / omp_get_max_threads();
}

PeakMeasurement measure_peak_tflops(const Comm& world, Precision precision, PeakClock clock, int64_t disturb_ms) {
  constexpr int kN = 1024, kMinReps = 5, kMaxReps = 100;
  constexpr double kMinSeconds = 0.3;
  PeakMeasurement p{0.0, precision, kN, omp_get_max_threads(), 0};
  const auto elems = static_cast<size_t>(kN) * kN;
  std::vector<float> a(elems), b(elems), c(elems);
  for (size_t i = 0; i < elems; ++i) {
    a[i] = static_cast<float>(i % 13) * 0.01f;
    b[i] = static_cast<float>(i % 7) * 0.02f;
  }
  const Stream s = Stream::cpu(precision);
  const Shape sq{kN, kN};
  const auto gemm = [&] { matmul_forward(s, Tensor(c.data(), sq), Tensor(a.data(), sq), Tensor(b.data(), sq), {}); };
  world.barrier();
  gemm();
  double best = 1e30, total = 0.0;
  while (p.repetitions < kMaxReps && (p.repetitions < kMinReps || total < kMinSeconds)) {
    const double t0 = peak_clock_seconds(clock);
    gemm();
    if (disturb_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(disturb_ms));
    const double dt = peak_clock_seconds(clock) - t0;
    best = std::min(best, dt);
    total += dt;
    ++p.repetitions;
  }
  double tflops = 2.0 * kN * kN * kN / best / 1e12;
  world.all_reduce(&tflops, 1).wait();
  p.tflops_per_rank = tflops / world.size();
  return p;
}

}  // namespace megatrain
