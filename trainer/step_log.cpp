#include "trainer/step_log.h"

#include <spdlog/spdlog.h>

#include "health/startup_times.h"
#include "model/flops.h"

namespace megatrain {

StepLog::StepLog(const Config& cfg, RankRun& run, const RunState& at, TrainResult& result)
    : cfg_(cfg),
      run_(run),
      at_(at),
      result_(result),
      first_step_(at.step + 1),
      flops_per_step_(model_flops_per_token(cfg.model, cfg.train.seq_len) * static_cast<double>(run.tokens_per_step())),
      peak_(cfg, run.world()),
      log_(cfg.log.metrics_file, run.world().rank() == 0, at.step),
      start_(std::chrono::steady_clock::now()) {
  StartupTimes::instance().mark("other set-up (MFU peak)");
}

void StepLog::rewind(int64_t step) {
  log_.rewind(step);
  logged_ = Logged{};
  last_end_.reset();
}

double StepLog::seconds_at_peak() const {
  const double flops_per_s = peak_.peak_tflops() * 1e12;
  return flops_per_s > 0.0 ? flops_per_step_ / run_.world().size() / flops_per_s : 0.0;
}

void StepLog::begin(int64_t) { run_.reset_comm_stats(); }

void StepLog::end(const StepOutcome& out) {
  result_.losses.push_back(out.loss);
  result_.grad_norms.push_back(out.norm);
  const auto now = std::chrono::steady_clock::now();
  logged_.time += out.seconds;
  logged_.iteration += last_end_ ? std::chrono::duration<double>(now - *last_end_).count() : out.seconds;
  last_end_ = now;
  ++logged_.steps;
  logged_.tokens += run_.tokens_of(out.step - 1 + at_.data_skip);
  logged_.comm += out.comm;
  if (out.step == first_step_) {
    log_.memory(out.step, run_.memory());
    StartupTimes::instance().mark("first step");
    if (run_.world().rank() == 0) spdlog::info("{}", StartupTimes::instance().summary());
  }
  if (out.step % cfg_.log.interval != 0 && !out.last) return;
  log_.step(averages(out));
  logged_ = Logged{};
}

StepMetrics StepLog::averages(const StepOutcome& out) {
  const auto n = static_cast<double>(logged_.steps);
  const double avg = logged_.time / n;
  const StepComm& c = logged_.comm;
  StepMetrics m;
  m.step = out.step;
  m.steps = cfg_.train.steps;
  const BatchSizes& batches = run_.data().train().sizes();
  m.global_batch_size = batches.size(out.step - 1 + at_.data_skip);
  m.consumed_samples = batches.first_sample(out.step + at_.data_skip);
  m.loss = out.loss;
  m.lr = out.lr;
  m.grad_norm = out.norm;
  m.step_time_ms = avg * 1e3;
  m.iter_time_ms = logged_.iteration / n * 1e3;
  m.tokens_per_s = static_cast<double>(logged_.tokens) / logged_.time;
  m.comm_ms = c.dp.busy_ms / n;
  m.exposed_comm_ms = c.dp.exposed_ms / n;
  m.comm_bytes = static_cast<double>(c.dp.bytes_moved) / n;
  m.hpz_comm_bytes = static_cast<double>(c.hpz_bytes) / n;
  m.tp_comm_ms = c.tp.busy_ms / n;
  m.tp_exposed_ms = c.tp.exposed_ms / n;
  m.pp_comm_ms = c.pp.busy_ms / n;
  // Every stage's idle time (blocked on its neighbours), gathered over the pipeline group.
  const Comm& pp = run_.groups().pp();
  m.pp_idle_ms.assign(static_cast<size_t>(pp.size()), 0.0);
  m.pp_idle_ms[static_cast<size_t>(pp.rank())] = c.pp.exposed_ms / n;
  if (pp.size() > 1) pp.all_reduce(m.pp_idle_ms.data(), pp.size()).wait();
  m.ep_comm_ms = c.ep.busy_ms / n;
  m.ep_exposed_ms = c.ep.exposed_ms / n;
  m.moe_dispatch_ms = run_.moe_dispatch_ms() / n;
  m.cp_comm_ms = c.cp.busy_ms / n;
  m.cp_exposed_ms = c.cp.exposed_ms / n;
  m.compute_ms = m.step_time_ms - m.exposed_comm_ms - m.tp_exposed_ms - m.ep_exposed_ms - m.cp_exposed_ms -
                 c.pp.exposed_ms / n;
  m.memory = run_.memory();
  m.precision = precision_name(cfg_.train.precision);
  m.world = run_.world().size();
  if (at_.scaler) m.loss_scale = out.loss_scale;
  m.skipped_steps = at_.skipped;
  m.moe = moe_metrics(run_.moe_stats(), logged_.steps);
  m.mfu =
      peak_.at(flops_per_step_ * m.tokens_per_s / static_cast<double>(run_.tokens_per_step()) / run_.world().size());
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  m.eta_s = elapsed / static_cast<double>(out.step - first_step_ + 1) * static_cast<double>(cfg_.train.steps - out.step);
  return m;
}

}  // namespace megatrain
