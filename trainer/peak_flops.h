// The peak that MFU divides by, measured when log.peak_tflops = "auto" (the default for CPU runs):
// all ranks at once time a square GEMM in the training precision (fp32) through matmul_forward, on
// the threads the run uses, best of several repetitions after a warm-up. Measuring together means
// ranks that share cores each get their share, as in the run. Invariant: the returned figure is the
// mean over ranks of what each rank's GEMM reached, in TFLOP/s per rank.
// [Note: CPU-time clock] With PeakClock::cpu a repetition's time is the rank's process CPU seconds
// over its threads instead of the wall clock: the speed the rank reaches while it holds cores, the
// same whether other ranks or other users' processes share those cores (the planner models the
// sharing itself, trainer/plan_cost.h).
#pragma once
#include "parallel/comm.h"

namespace megatrain {

struct PeakMeasurement {
  double tflops_per_rank = 0.0;  // mean over ranks
  int n = 0;                     // the GEMM is n × n × n
  int threads = 0, repetitions = 0;
};

enum class PeakClock { wall, cpu };

PeakMeasurement measure_peak_tflops(const Comm& world, PeakClock clock = PeakClock::wall);

// Seconds by `clock` since an arbitrary origin, for differences: the wall clock, or the process's
// CPU seconds over its OpenMP threads ([Note: CPU-time clock]).
double peak_clock_seconds(PeakClock clock);

}  // namespace megatrain
