// The peak that MFU divides by, measured when log.peak_tflops = "auto" (the default for CPU runs):
// all ranks at once time a square GEMM in the training precision (fp32) through matmul_forward, on
// the threads the run uses, best of several repetitions after a warm-up. Measuring together means
// ranks that share cores each get their share, as in the run. Invariant: the returned figure is the
// mean over ranks of what each rank's GEMM reached, in TFLOP/s per rank.
#pragma once
#include "parallel/comm.h"

namespace megatrain {

struct PeakMeasurement {
  double tflops_per_rank = 0.0;  // mean over ranks
  int n = 0;                     // the GEMM is n × n × n
  int threads = 0, repetitions = 0;
};

PeakMeasurement measure_peak_tflops(const Comm& world);

}  // namespace megatrain
