// The peak MFU divides by over a run, and the MFU of each logged interval (README "Metrics and
// MFU"). With log.peak_tflops = "auto" the peak is a GEMM in the run's compute precision, measured
// at start-up (trainer/peak_flops.h); with a number, that number, never re-measured; 0: no MFU.
// [Note: MFU over 100 %] A model can compute no faster than its GEMMs, so a logged interval whose
// FLOP/s exceed the measured peak on any rank means the start-up measurement was disturbed (the
// cores busy for a moment): every rank measures again, together, logs it, and the peak becomes the
// higher of the two, up to kMaxRemeasures times a run. An MFU that still exceeds 100 % (the re-measures
// used up, or a log.peak_tflops below what the run reaches) is reported capped at 1 and flagged
// (`exceeded`), never as a figure over 100 %.
// Invariant: every rank holds the same peak, and every rank calls at() at the same logged steps.
#pragma once
#include <optional>

#include "config/config.h"
#include "parallel/comm.h"
#include "trainer/metrics.h"

namespace megatrain {

class MfuPeak {
 public:
  static constexpr int kMaxRemeasures = 3;
  // Measures the peak ("auto", collective over `world`, logged on rank 0), or takes the number.
  MfuPeak(const Config& cfg, const Comm& world);
  // The MFU of an interval in which this rank reached `flops_per_s` model FLOP/s; absent when MFU is
  // off. Collective over the world when the peak is measured ([Note: MFU over 100 %]).
  std::optional<MfuReading> at(double flops_per_s);
  double peak_tflops() const { return tflops_; }

 private:
  void measure(int64_t disturb_ms);

  const Comm& world_;
  Precision precision_;
  bool automatic_;
  double tflops_ = 0.0;
  int remeasures_ = 0;
  bool warned_ = false;  // the cap has been logged
};

}  // namespace megatrain
