// Training metrics: one console line and one JSON line (in log.metrics_file) per logged step,
// plus a JSON line with val_loss after each evaluation. Only rank 0 writes.
// Invariant: a run resumed from step k leaves the file with each step's rows once, in order: the
// rows of steps ≤ k are kept, those after k (about to be redone) are dropped, and the run appends.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/comm.h"

namespace megatrain {

// Bytes one rank holds, by kind (optim/zero_plan.h, optim/adamw.h, model/stage.h).
// params: what compute reads (16-bit at bf16/fp16); master_params: the float32 masters the
// optimizer updates, when they are a separate buffer (bf16/fp16). gemm_scratch: the linear layers'
// 16-bit operand copies (bf16/fp16). peak_rss: the process's peak resident memory so far
// (getrusage), everything included.
struct MemoryMetrics {
  int64_t params = 0, master_params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0;
  int64_t gemm_scratch = 0, peak_rss = 0;
  // train.device = "cuda": the most device memory handed out at once (the caching allocator's
  // peak; everything above that lives on the device is in it). 0 on CPU.
  int64_t device_peak = 0;
};

int64_t peak_rss_bytes();

// One MoE block's routing over the logged steps: kept tokens per expert per step (min, mean and
// max over the experts), the fraction of assignments capacity dropped, and the mean load-balancing
// and z losses of its micro-batches (model/moe_router.h).
struct MoeLayerMetrics {
  int layer = 0;
  double tokens_min = 0, tokens_mean = 0, tokens_max = 0, dropped_fraction = 0, aux_loss = 0, z_loss = 0;
};
struct MoeLayerStats;
// From the stats summed over `steps` steps (model/stage.h).
std::vector<MoeLayerMetrics> moe_metrics(const std::vector<MoeLayerStats>& stats, int64_t steps);

// A logged interval's MFU and the peak it divides by (trainer/mfu_peak.h).
struct MfuReading {
  double mfu = 0.0;          // ≤ 1
  double peak_tflops = 0.0;  // per rank
  std::string source;        // "measured fp32 GEMM", "measured bf16 GEMM", … or "log.peak_tflops"
  bool exceeded = false;     // the interval ran above the peak: mfu is capped at 1 ([Note: MFU over 100 %])
};

struct StepMetrics {
  int64_t step = 0, steps = 0;
  // The step's global batch and the samples consumed after it (Megatron's log line prints both; a
  // batch ramp changes the first, data/batch_sizes.h).
  int64_t global_batch_size = 0, consumed_samples = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, step_time_ms = 0;
  // The whole iteration: from the previous step's log point to this one's, so also the work between
  // steps that step_time_ms leaves out (the per-step agreements, saves, evaluation); a launch's first
  // step (and the first after a rollback) counts its step time. What ETTR counts (R25: Megatron's
  // iteration time; scripts/resilient_report.py).
  double iter_time_ms = 0;
  std::optional<MfuReading> mfu;  // absent when log.peak_tflops = 0
  double eta_s = 0;
  // Data-parallel communication per step (averages over the logged steps): time operations were in
  // flight, time the rank was blocked waiting for them, and bytes moved (parallel/comm.h formula);
  // compute_ms = step_time_ms − exposed_comm_ms.
  // Tensor-parallel communication the same way (tp_comm_ms in flight, tp_exposed_ms blocked).
  // Pipeline: pp_comm_ms with sends or receives in flight on this rank, and per stage the time it
  // sat blocked on its neighbours (the bubble and the transfers it waited for), stage order.
  // compute_ms = step_time_ms − exposed_comm_ms − tp_exposed_ms − ep_exposed_ms − cp_exposed_ms − this rank's pp
  // idle time.
  double comm_ms = 0, exposed_comm_ms = 0, comm_bytes = 0, compute_ms = 0;
  double hpz_comm_bytes = 0;  // of comm_bytes, those moved within the rank's hpZ group (one host)
  double tp_comm_ms = 0, tp_exposed_ms = 0;
  // Expert parallelism: the ep group's communication (the token all-to-alls and their counts) in
  // flight and blocked, and the time MoE blocks spent moving tokens (permute, exchange, regroup,
  // un-permute; exposed all-to-all included), per step.
  double ep_comm_ms = 0, ep_exposed_ms = 0, moe_dispatch_ms = 0;
  double cp_comm_ms = 0, cp_exposed_ms = 0;  // context parallelism's attention messages
  double pp_comm_ms = 0;
  std::vector<double> pp_idle_ms;
  MemoryMetrics memory;
  std::string precision = "fp32";  // train.precision
  int world = 1;                     // the job's ranks (an elastic run changes them: the ETTR counts by them)
  std::optional<double> loss_scale;  // fp16: the scale the step's loss was multiplied by
  int64_t skipped_steps = 0;          // fp16: steps skipped for overflowing gradients, since step 0
  std::vector<MoeLayerMetrics> moe;   // per MoE block, model order
};

// The rank's communication during one step, by group ([Note: ZeRO++]: hpZ's gathers within a host
// group are data-parallel communication; so is the expert-data-parallel reduction).
struct StepComm {
  CommStats dp, tp, pp, ep, world, cp;
  int64_t hpz_bytes = 0;  // of dp's, within the hpZ group
  // What the rank spent blocked on its peers.
  double waited_ms() const {
    return dp.exposed_ms + tp.exposed_ms + pp.exposed_ms + ep.exposed_ms + world.exposed_ms + cp.exposed_ms;
  }
  StepComm& operator+=(const StepComm& o) {  // totals over several steps
    dp += o.dp, tp += o.tp, pp += o.pp, ep += o.ep, world += o.world, cp += o.cp;
    hpz_bytes += o.hpz_bytes;
    return *this;
  }
};

// A file of one JSON row per step, written by one rank: a fresh run (resumed_step 0) starts it
// empty; a run resumed from step k keeps its rows through k (metrics_file_keep_through) and appends;
// a rollback rewinds it. `key` is the config key that names it (for messages); path "" = no file.
class StepRowsFile {
 public:
  StepRowsFile(std::string path, std::string key, int64_t resumed_step);
  bool is_open() const { return file_.is_open(); }
  void write(const std::string& row);  // one line, flushed
  // Drops the rows after `step` and goes on appending.
  void rewind(int64_t step);

 private:
  std::ofstream file_;
  std::string path_, key_;
};

class MetricsLog {
 public:
  // path "" = console only. resumed_step 0 = a fresh run (the file starts empty); k > 0 = resumed
  // from a checkpoint at step k (metrics_file_keep_through, then append).
  MetricsLog(const std::string& path, bool enabled, int64_t resumed_step);
  void step(const StepMetrics& m);
  void validation(int64_t step, double val_loss);
  // One console line (the JSON step lines carry the same numbers).
  void memory(int64_t step, const MemoryMetrics& m);
  // Drops the rows after `step` (a rollback will redo them) and goes on appending.
  void rewind(int64_t step) { rows_.rewind(step); }

 private:
  StepRowsFile rows_;
  bool enabled_;
};

// Rewrites PATH (atomically) keeping its rows of steps ≤ STEP. A last line without its newline (a
// run killed while writing it) is dropped; any other line that is not a JSON object with an integer
// "step" is an InputError naming PATH:LINE and the config key `key` that names the file. A missing
// file is left missing.
void metrics_file_keep_through(const std::string& path, int64_t step, std::string_view key = "log.metrics_file");

std::string format_duration(double seconds);

}  // namespace megatrain
