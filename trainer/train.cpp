#include "trainer/train.h"

#include <chrono>

#include "health/startup_times.h"
#include "trainer/evaluation.h"
#include "trainer/health_watch.h"
#include "trainer/lr_schedule.h"
#include "trainer/memory_snapshots.h"
#include "trainer/rank_run.h"
#include "trainer/replica_check.h"
#include "trainer/run_state.h"
#include "trainer/run_summary.h"
#include "trainer/sample_log.h"
#include "trainer/step_compute.h"
#include "trainer/step_faults.h"
#include "trainer/step_log.h"
#include "trainer/step_saves.h"
#include "trainer/update_guard.h"

namespace megatrain {

// The training loop. A step: the rank's micro-batches forward and backward through the pipeline
// schedule with the gradients reduced as their buckets fill (a StepCompute, trainer/step_compute.h:
// synchronous or with bounded staleness, the step's faults attached), the loss judged (spikes,
// Inf/NaN on any rank), the global gradient norm,
// and AdamW with clipping over each optimizer group (RankRun::optimizer_step); what watches the
// steps (health, faults, the replica check, metrics, checkpoints and stops, evaluation) are step
// observers (trainer/step_observer.h), called in that order.
TrainResult run_training(const Config& cfg, const Comm& world, const TrainOptions& options) {
  using Clock = std::chrono::steady_clock;
  FaultPlan& faults = FaultPlan::from_environment();
  HealthWatch health(cfg, world, faults);
  RankRun run(cfg, world, RankRun::ParamsAt::load);
  StartupTimes::instance().mark("model and data");
  // Loads write through a view of the state taken for them (then state_written); not one kept for
  // the run, which with bf16 moments would hold their float32 widening (optim/host_moments.h).
  RunState at = resume(cfg, run.checkpoint_tensors(), run, world, options.allow_fresh_start);
  StartupTimes::instance().mark(at.loaded ? "checkpoint load" : "parameter initialisation");
  TrainResult result;
  StepSaves saves(cfg, run, at, health.progress(), result);
  MemorySnapshots snapshots(cfg, run, at);
  log_run_summary(cfg, run, at);
  ReplicaCheck replicas(cfg, run, snapshots);
  UpdateGuard guard(cfg, world.rank() == 0);
  const BatchSizes& batches = run.data().train().sizes();
  const LrSchedule lr = lr_schedule_of(cfg.optimizer, batches);
  StepLog log(cfg, run, at, result);
  SampleLog samples(cfg, run, at);
  StepFaults step_faults(cfg, run, faults);
  Evaluation evaluation(cfg, run, health.progress(), log, result);
  const StepObservers observers{&health, &step_faults, &replicas, &snapshots, &samples, &log, &saves, &evaluation};
  const std::unique_ptr<StepCompute> compute = step_faults.attach(
      make_step_compute(cfg, run, at, [&saves](int64_t step) { return saves.horizon(step); }), at);
  health.set_first_step(at.step + 1);
  health.expect_first_step(log.seconds_at_peak());
  for (int64_t step = at.step; step < cfg.train.steps; ++step) {
    StepOutcome out = StepOutcome::beginning(step + 1, cfg.train.steps);
    observers.begin(out.step);
    out.loss_scale = at.loss_scale();
    out.loss = compute->loss(step, out.loss_scale);
    const Verdict verdict = guard.judge(out.step, out.loss, saves.can_roll_back());
    observers.updating(out.step);
    if (verdict == Verdict::roll_back) {
      saves.wait(out.step);
      roll_back(cfg, run.checkpoint_tensors(), run, world, at, out.step);
      log.rewind(at.step);
      samples.rewind(at.step);
      step = at.step - 1;  // the loop's ++step: the step after the checkpoint's
      continue;
    }
    const Overflow overflow = compute->first_overflow(false);  // Inf/NaN on any rank
    // Skipped steps do not advance the schedule (Megatron); the updates count the samples of as many
    // batches from the first (trainer/lr_schedule.h).
    out.lr = lr.at(batches.first_sample(out.step - at.skipped));
    out.updated = overflow.rank < 0 && verdict == Verdict::update;
    if (out.updated) {
      out.norm = run.grad_norm() / out.loss_scale;
      run.optimizer_step(static_cast<float>(out.lr), out.norm, static_cast<float>(1.0 / out.loss_scale));
    }
    guard.count(out.step, overflow, out.updated, out.loss_scale, at);
    observers.updated(out);
    out.seconds = std::chrono::duration<double>(Clock::now() - out.began).count();
    out.comm = run.comm_stats();
    observers.end(out);
    if (out.last || saves.stop(out)) break;
  }
  compute->finish();  // a stop between two horizons leaves later steps' reductions in flight
  saves.finish();
  snapshots.finish();
  return result;
}

}  // namespace megatrain
