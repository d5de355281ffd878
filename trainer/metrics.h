// Training metrics: one console line and one JSON line (in log.metrics_file) per logged step,
// plus a JSON line with val_loss after each evaluation. Only rank 0 writes.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace megatrain {

struct StepMetrics {
  int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, step_time_ms = 0;
  std::optional<double> mfu;  // absent when log.peak_tflops = 0
  double eta_s = 0;
};

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool enabled);  // path "" = console only
  void step(const StepMetrics& m);
  void validation(int64_t step, double val_loss);

 private:
  std::ofstream file_;
  bool enabled_;
};

std::string format_duration(double seconds);

}  // namespace megatrain
