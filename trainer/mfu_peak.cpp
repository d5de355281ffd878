#include "trainer/mfu_peak.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "health/fault_plan.h"
#include "trainer/peak_flops.h"

namespace megatrain {

MfuPeak::MfuPeak(const Config& cfg, const Comm& world)
    : world_(world), precision_(cfg.train.precision), automatic_(cfg.log.peak_tflops.automatic) {
  if (!automatic_) {
    tflops_ = cfg.log.peak_tflops.value;
    return;
  }
  const Fault* slow = FaultPlan::from_environment().find(FaultKind::peak_slow, world.rank(), 0);
  if (slow) log_injection(*slow, world.rank(), 0, fmt::format("ms={}", slow->ms));
  measure(slow ? slow->ms : 0);
}

void MfuPeak::measure(int64_t disturb_ms) {
  const PeakMeasurement p = measure_peak_tflops(world_, precision_, PeakClock::wall, disturb_ms);
  const double before = tflops_;
  tflops_ = std::max(tflops_, p.tflops_per_rank);
  if (world_.rank() != 0) return;
  const std::string how = fmt::format("{} GEMM {}x{}x{} on {} threads, best of {}, mean over {} ranks",
                                      precision_name(p.precision), p.n, p.n, p.n, p.threads, p.repetitions,
                                      world_.size());
  if (before == 0.0)
    spdlog::info("MFU peak: measured {:.4g} GFLOP/s per rank ({}); log.peak_tflops = a number overrides it",
                 p.tflops_per_rank * 1e3, how);
  else
    spdlog::warn("MFU peak re-measured ({}/{}): the steps ran above the {:.4g} GFLOP/s per rank measured before, "
                 "a measurement disturbed by other work; measured {:.4g} GFLOP/s per rank now ({}); MFU divides by "
                 "{:.4g} GFLOP/s from here on",
                 remeasures_, kMaxRemeasures, before * 1e3, p.tflops_per_rank * 1e3, how, tflops_ * 1e3);
}

std::optional<MfuReading> MfuPeak::at(double flops_per_s) {
  if (tflops_ <= 0.0) return std::nullopt;
  if (automatic_) {
    double fastest = flops_per_s;
    world_.all_reduce(&fastest, 1, ReduceOp::max).wait();
    if (fastest > tflops_ * 1e12 && remeasures_ < kMaxRemeasures) {
      ++remeasures_;
      measure(0);
    }
  }
  MfuReading r;
  r.peak_tflops = tflops_;
  r.source = automatic_ ? fmt::format("measured {} GEMM", precision_name(precision_)) : "log.peak_tflops";
  r.mfu = flops_per_s / (tflops_ * 1e12);
  if (r.mfu > 1.0) {
    if (!warned_ && world_.rank() == 0)
      spdlog::warn("MFU: the steps ran at {:.4g} GFLOP/s per rank, above the peak MFU divides by ({} {:.4g} "
                   "GFLOP/s{}); MFU is reported capped at 100 % and flagged (mfu_peak.exceeded in the metrics)",
                   flops_per_s / 1e9, r.source, tflops_ * 1e3,
                   automatic_ ? fmt::format(", after {} re-measures", remeasures_)
                              : "; set log.peak_tflops to the device's peak, or \"auto\"");
    warned_ = true;
    r.mfu = 1.0;
    r.exceeded = true;
  }
  return r;
}

}  // namespace megatrain
