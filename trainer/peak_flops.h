// The peak that MFU divides by, measured when log.peak_tflops = "auto" (the default for CPU runs):
// all ranks at once time a square GEMM in the run's compute precision through matmul_forward on a
// CPU stream of that precision — the path the linear layers take (fp32: the float32 GEMM; bf16 and
// fp16: their 16-bit operand copies, kernels/cpu/matmul.cpp) — on the threads the run uses. Quietly:
// the best of at least kMinReps timings spread over at least kMinSeconds after a warm-up, so a
// moment of other work on the cores leaves at least one timing untouched. Measuring together means
// ranks that share cores each get their share, as in the run. Invariant: the returned figure is the
// mean over ranks of what each rank's GEMM reached, in TFLOP/s per rank.
// [Note: CPU-time clock] With PeakClock::cpu a repetition's time is the rank's process CPU seconds
// over its threads instead of the wall clock: the speed the rank reaches while it holds cores, the
// same whether other ranks or other users' processes share those cores (the planner models the
// sharing itself, planner/plan_cost.h).
#pragma once
#include "kernels/device.h"
#include "parallel/comm.h"

namespace megatrain {

struct PeakMeasurement {
  double tflops_per_rank = 0.0;  // mean over ranks
  Precision precision = Precision::fp32;
  int n = 0;                     // the GEMM is n × n × n
  int threads = 0, repetitions = 0;
};

enum class PeakClock { wall, cpu };

// `disturb_ms` > 0 sleeps that long inside every timing: a measurement disturbed on purpose, as by
// other work on the cores (MEGATRAIN_FAULT peak_slow, health/fault_plan.h).
PeakMeasurement measure_peak_tflops(const Comm& world, Precision precision, PeakClock clock = PeakClock::wall,
                                    int64_t disturb_ms = 0);

// Seconds by `clock` since an arbitrary origin, for differences: the wall clock, or the process's
// CPU seconds over its OpenMP threads ([Note: CPU-time clock]).
double peak_clock_seconds(PeakClock clock);

}  // namespace megatrain
