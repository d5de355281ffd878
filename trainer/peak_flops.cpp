#include "trainer/peak_flops.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/ops.h"

namespace megatrain {

PeakMeasurement measure_peak_tflops(const Comm& world) {
  using Clock = std::chrono::steady_clock;
  constexpr int kN = 1024, kMinReps = 3, kMaxReps = 20;
  constexpr double kMinSeconds = 0.2;
  PeakMeasurement p{0.0, kN, omp_get_max_threads(), 0};
  const auto elems = static_cast<size_t>(kN) * kN;
  std::vector<float> a(elems), b(elems), c(elems);
  for (size_t i = 0; i < elems; ++i) {
    a[i] = static_cast<float>(i % 13) * 0.01f;
    b[i] = static_cast<float>(i % 7) * 0.02f;
  }
  const Stream s = Stream::cpu();
  const Shape sq{kN, kN};
  const auto gemm = [&] { matmul_forward(s, Tensor(c.data(), sq), Tensor(a.data(), sq), Tensor(b.data(), sq), {}); };
  world.barrier();
  gemm();
  double best = 1e30, total = 0.0;
  while (p.repetitions < kMaxReps && (p.repetitions < kMinReps || total < kMinSeconds)) {
    const auto t0 = Clock::now();
    gemm();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
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
