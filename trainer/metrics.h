// Training metrics: one console line and one JSON line (in log.metrics_file) per logged step,
// plus a JSON line with val_loss after each evaluation. Only rank 0 writes.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace megatrain {

// Bytes one rank holds, by kind (parallel/zero.h, model/optimizer.h, model/gpt.h).
struct MemoryMetrics {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0;
};

struct StepMetrics {
  int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, step_time_ms = 0;
  std::optional<double> mfu;  // absent when log.peak_tflops = 0
  double eta_s = 0;
  // Data-parallel communication per step (averages over the logged steps): time operations were in
  // flight, time the rank was blocked waiting for them, and bytes moved (parallel/comm.h formula);
  // compute_ms = step_time_ms − exposed_comm_ms.
  double comm_ms = 0, exposed_comm_ms = 0, comm_bytes = 0, compute_ms = 0;
  MemoryMetrics memory;
};

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool enabled);  // path "" = console only
  void step(const StepMetrics& m);
  void validation(int64_t step, double val_loss);
  // One console line (the JSON step lines carry the same numbers).
  void memory(int64_t step, const MemoryMetrics& m);

 private:
  std::ofstream file_;
  bool enabled_;
};

std::string format_duration(double seconds);

}  // namespace megatrain
