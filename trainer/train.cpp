#include "trainer/train.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "health/fault_inject.h"
#include "health/heartbeat.h"
#include "health/loss_spikes.h"
#include "health/ready_check.h"
#include "health/link_monitor.h"
#include "health/reachability.h"
#include "health/startup_times.h"
#include "health/straggler.h"
#include "health/timeline.h"
#include "health/watchdog.h"
#include "kernels/cuda/backend.h"
#include "kernels/ops.h"
#include "parallel/comm_gather.h"
#include "parallel/flight_recorder.h"
#include "parallel/launch_env.h"
#include "model/gpt.h"
#include "trainer/checkpoint.h"
#include "trainer/loss_scaler.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/mfu_peak.h"
#include "trainer/rank_run.h"
#include "trainer/replica_check.h"
#include "trainer/stop_request.h"

namespace megatrain {
namespace {

using Clock = std::chrono::steady_clock;

// Step time and communication summed over the steps since the last log line.
struct Logged {
  double time = 0.0;
  int64_t steps = 0;
  CommStats dp, tp, pp, ep;
  int64_t hpz_bytes = 0;  // of dp's, within the hpZ group
  void add(double dt, const CommStats& d, const CommStats& t, const CommStats& p, const CommStats& e) {
    time += dt;
    ++steps;
    dp += d;
    tp += t;
    pp += p;
    ep += e;
  }
};

// MEGATRAIN_FAULT bitflip: bit 22 of the first value this rank holds of the named parameter.
void flip_a_bit(const Fault& f, RankRun& run, int64_t step) {
  MT_INPUT_CHECK(run.layout.contains(f.detail) && !run.layout.spec(run.layout.index_of(f.detail)).expert,
                 "MEGATRAIN_FAULT bitflip: tensor \"{}\" is not a dense parameter of rank {} (e.g. \"{}\")", f.detail,
                 run.world.rank(), run.layout.spec(0).name);
  log_injection(f, run.world.rank(), step, "tensor=" + f.detail);
  const FlatSlice held = run.held_params_host();  // on a device, a host copy
  const int64_t at = run.layout.offset(run.layout.index_of(f.detail));
  if (at < held.begin || at >= held.end) return;
  uint32_t bits;
  float* x = held.data + (at - held.begin);
  std::memcpy(&bits, x, 4);
  bits ^= 1u << 22;
  std::memcpy(x, &bits, 4);  // at 16 bits the master: the next update's rounding carries it to compute
  if (run.on_device()) run.params_written();
}

// Where a loaded checkpoint puts training: the steps done, the global batches skipped by spike
// rollbacks (the data position is step + data_skip batches), the updates skipped.
struct Position {
  int64_t step = 0, data_skip = 0, skipped = 0;
};

// Takes over a loaded checkpoint's state: the optimizer's update count, the loss scaler, the data
// position (checked against the global batch size and the batches the loader reserves).
Position adopt(const CheckpointMeta& meta, const Config& cfg, RankRun& run, std::optional<DynamicLossScaler>& scaler,
               bool rank0) {
  run.state_written();
  const int64_t G = cfg.train.global_batch_size, step = meta.state.step, consumed = meta.state.consumed_samples;
  MT_INPUT_CHECK(consumed % G == 0 && consumed / G >= step,
                 "{}: the checkpoint consumed {} samples in {} steps, which train.global_batch_size = {} cannot "
                 "produce; resume with the global batch size it was trained with",
                 cfg.source, consumed, step, G);
  const Position at{step, consumed / G - step, meta.state.skipped_steps};
  MT_INPUT_CHECK(at.data_skip <= batches_reserved_for_rollbacks(cfg.health),
                 "{}: the checkpoint's data position is {} batches past its step (spike rollbacks skipped them), "
                 "more than the {} batches the data loader reserves for skips; set health.on_spike = \"rollback\" "
                 "with spike_skip_batches × spike_max_rollbacks at least that",
                 cfg.source, at.data_skip, batches_reserved_for_rollbacks(cfg.health));
  MT_INPUT_CHECK(step <= cfg.train.steps, "{}: the checkpoint is at step {}, beyond train.steps = {}", cfg.source, step,
                 cfg.train.steps);
  if (meta.state.seed != cfg.train.seed && rank0)
    spdlog::warn("checkpoint was trained with seed {}, continuing with train.seed = {}: data order and dropout change",
                 meta.state.seed, cfg.train.seed);
  run.set_step_count(step - at.skipped);
  if (scaler && meta.state.loss_scale > 0.0)
    scaler->restore({meta.state.loss_scale, meta.state.loss_scale_growth_tracker,
                     meta.state.loss_scale_hysteresis_tracker});
  return at;
}

// health.on_spike = "rollback" (robustness spec R17, PaLM's recipe): reloads the newest committed
// checkpoint in this process and moves the data health.spike_skip_batches global batches past its
// position, so the batches that led to the spike are not trained on again.
Position roll_back(const Config& cfg, const CheckpointTensors& state, RankRun& run, const Comm& world,
                   std::optional<DynamicLossScaler>& scaler, int64_t spike_step, int rollbacks) {
  const bool rank0 = world.rank() == 0;
  if (rollbacks > cfg.health.spike_max_rollbacks)
    throw NonFiniteSteps(fmt::format(
        "loss spike at step {} after {} rollbacks (health.spike_max_rollbacks): training keeps diverging; resume from "
        "an earlier checkpoint with a lower optimizer.lr",
        spike_step, rollbacks - 1));
  Config latest = cfg;
  latest.checkpoint.load = "latest";
  Position at = adopt(*checkpoint_load(latest, state, world, false, false), cfg, run, scaler, rank0);
  const int64_t from = at.step + at.data_skip;
  at.data_skip += cfg.health.spike_skip_batches;
  if (rank0)
    spdlog::warn("LOSS_SPIKE_ROLLBACK step={} to_step={} skipped_batches={}..{} rollback={}/{}: back to the checkpoint "
                 "of step {}, training on from global batch {}",
                 spike_step, at.step, from + 1, from + cfg.health.spike_skip_batches, rollbacks,
                 cfg.health.spike_max_rollbacks, at.step, at.step + at.data_skip + 1);
  return at;
}

}  // namespace

TrainResult run_training(const Config& cfg, const Comm& world, const TrainOptions& options) {
  const bool rank0 = world.rank() == 0;
  const int rank = world.rank();
  FaultPlan& faults = FaultPlan::from_environment();
  Progress progress;
  progress.enter(Section::init, 0);
  FlightRecorder::instance().set_capacity(static_cast<size_t>(cfg.health.flight_recorder_entries));
  Watchdog watchdog(cfg.health, progress, rank, host_name());
  const int node = rank / ranks_per_node_from_env();
  Heartbeat heartbeat(cfg.health, progress, rank, node, host_name());
  Timeline timeline(cfg.health, rank, host_name());
  inject_at_step_start(faults, rank, 0);
  wait_for_all_ranks(world, 0.9 * cfg.health.init_timeout_s);  // before the watchdogs' init timeout fires
  StartupTimes::instance().mark("roll call");
  // Every rank's host, gathered once (after the roll call) for the detectors that name hosts.
  const std::vector<std::string> hosts = all_gather_text(world, host_name());
  StragglerDetector stragglers(cfg.health, world, node, hosts);
  LinkMonitor links(cfg.health, world, hosts);
  const PeerListener listener;  // what peers' watchdogs connect to (health/reachability.h)
  watchdog.set_peers(gather_peer_addresses(world, hosts, listener));
  RankRun run(cfg, world);
  StartupTimes::instance().mark("model and data");
  const CheckpointTensors state = run.checkpoint_tensors();  // where loads write (then state_written)
  const int64_t G = cfg.train.global_batch_size;
  int64_t start_step = 0, skipped = 0, data_skip = 0, nonfinite_in_a_row = 0;
  int rollbacks = 0;
  bool have_checkpoint = false;  // a committed one under checkpoint.dir to roll back to
  std::optional<DynamicLossScaler> scaler;
  if (cfg.train.precision == Precision::fp16) scaler.emplace(cfg.loss_scale);
  if (auto meta = checkpoint_load(cfg, state, world, options.allow_fresh_start, rank0)) {
    const Position at = adopt(*meta, cfg, run, scaler, rank0);
    start_step = at.step, data_skip = at.data_skip, skipped = at.skipped;
    have_checkpoint = cfg.checkpoint.load == "latest";
  }
  StartupTimes::instance().mark("checkpoint load");
  std::unique_ptr<Checkpointer> checkpointer;  // with a folder to save to: periodic saves and the stop's
  if (!cfg.checkpoint.dir.empty()) checkpointer = std::make_unique<Checkpointer>(cfg, world);
  StopRequests stop(cfg, world);
  if (rank0) {
    spdlog::info("model: {} parameters, {:.1f} MiB activations on rank 0; data: {} tokens, {} samples per epoch",
                 run.stored_layout.num_parameters(), static_cast<double>(run.activation_bytes()) / (1 << 20),
                 run.data.train_tokens(), run.data.train_samples_per_epoch());
    if (cfg.train.precision != Precision::fp32)
      spdlog::info("precision {0}: compute reads a {0} copy of the float32 master weights; the linear layers' GEMMs: "
                   "{1}; gradients and optimizer state are float32{2}",
                   precision_name(cfg.train.precision), matmul_path(run.stream),
                   scaler ? fmt::format("; dynamic loss scale from {:g}", scaler->scale()) : "");
    if (cfg.train.device != Device::cpu) {
      const LocalDims local = local_dims(cfg.model, run.layout.tp());  // this rank's heads
      const AttentionPath attention = cuda_backend().attention_path(
          run.stream, cfg.train.micro_batch_size, cfg.train.seq_len, local.heads, local.kv_heads, cfg.model.head_dim());
      spdlog::info("train.device = \"cuda\": one device per rank; GEMMs: {}; attention: {}; the communicators move "
                   "device buffers through {}",
                   matmul_path(run.stream), attention.path,
                   cuda_backend().host_addressable() ? "MPI (this backend's memory is host memory)" : "NCCL");
      if (!attention.warning.empty()) spdlog::warn("WARNING: attention: {}", attention.warning);
    }
    spdlog::info("{} micro-batches of {} per step per rank, tp = {}{}, pp = {} ({}, {} chunk(s) per rank, {} "
                 "micro-batch slots on rank 0), dp = {}, ZeRO stage {}, {} gradient buckets, {} tokens per step",
                 run.data.train().micro_batches_per_step(), cfg.train.micro_batch_size, run.groups.tp().size(),
                 cfg.parallel.sequence_parallel ? " (sequence parallel)" : "", run.groups.pp().size(),
                 cfg.parallel.pipeline_schedule, cfg.parallel.virtual_stages, run.held_micro_batches(),
                 run.groups.dp().size(), cfg.parallel.zero_stage, run.optim_groups().front().zero().buckets().size(),
                 run.tokens_per_step());
  }
  ReplicaCheck replicas(cfg, run);
  LossSpikes spikes(cfg.health);
  const LrSchedule lr{cfg.optimizer.lr, cfg.optimizer.min_lr, cfg.optimizer.warmup_steps,
                      cfg.optimizer.decay_steps, cfg.optimizer.decay};
  const double flops_per_step =
      gpt_flops_per_token(cfg.model, cfg.train.seq_len) * static_cast<double>(run.tokens_per_step());
  MfuPeak peak(cfg, world);
  StartupTimes::instance().mark("other set-up (MFU peak)");
  MetricsLog log(cfg.log.metrics_file, rank0, start_step);
  TrainResult result;
  Logged logged;
  // [Note: stale-synchronous step] (trainer/rank_run.h): the steps after which no gradient
  // reduction may be in flight: a periodic save, exit_after_steps' stop, the run's last step.
  const auto stale_horizon = [&](int64_t step) {
    int64_t h = cfg.train.steps;
    const int64_t every = cfg.checkpoint.save_interval;
    if (checkpointer && every > 0) h = std::min(h, (step / every + 1) * every);
    if (cfg.train.exit_after_steps > 0) h = std::min(h, start_step + cfg.train.exit_after_steps);
    return h;
  };
  const bool hpz = cfg.parallel.zero_hpz_partition_size > 1;
  const auto start = Clock::now();
  for (int64_t step = start_step; step < cfg.train.steps; ++step) {
    progress.enter(step == start_step ? Section::init : Section::step, step + 1);  // init ends with the first step
    const auto t0 = Clock::now();
    faults.arm_random(step + 1, world.size());
    inject_at_step_start(faults, rank, step + 1);
    inject_extra_collective(faults, world, step + 1);
    run.groups.dp().reset_stats();
    run.groups.tp().reset_stats();
    run.groups.pp().reset_stats();
    run.groups.ep().reset_stats();
    run.groups.edp().reset_stats();
    if (hpz) run.optim_groups().front().zero().hpz_comm().reset_stats();
    world.reset_stats();
    const double scale = scaler ? scaler->scale() : 1.0;
    // MEGATRAIN_FAULT nan: this rank's loss, or its gradients before any reduction: all of them (a
    // NaN loss scale) or, with element=, one value (synchronous training only: a stale step
    // computes other steps' batches).
    const Fault* nan = cfg.parallel.max_staleness == 0 ? faults.find(FaultKind::nan, rank, step + 1) : nullptr;
    const bool loss_nonfinite = nan && nan->detail == "loss", one_nan = nan && !nan->element.empty();
    const bool nan_grads = nan && nan->detail == "grad" && !one_nan;
    if (nan)
      log_injection(*nan, rank, step + 1, "where=" + nan->detail + (one_nan ? " " + run.arm_grad_nan(nan->element) : ""));
    double loss = cfg.parallel.max_staleness > 0
                      ? run.stale_step(step, data_skip, stale_horizon(step))
                      : run.train_step(step + data_skip, nan_grads ? std::numeric_limits<double>::quiet_NaN() : scale);
    // MEGATRAIN_FAULT spike strikes the data: the step that trains on global batch `step` (1-based).
    if (const Fault* f = faults.find(FaultKind::spike, rank, step + 1 + data_skip)) {
      log_injection(*f, rank, step + 1, fmt::format("factor={} batch={}", f->factor, step + 1 + data_skip));
      loss *= f->factor;
    }
    const bool spike = spikes.check(step + 1, loss, rank0);
    if (spike && cfg.health.on_spike == "rollback" && !have_checkpoint && rank0)
      spdlog::warn("LOSS_SPIKE step={}: no checkpoint saved yet to roll back to; the update is skipped", step + 1);
    if (spike && cfg.health.on_spike == "rollback" && have_checkpoint) {
      progress.enter(Section::checkpoint, step + 1);
      checkpointer->wait();
      const Position at = roll_back(cfg, state, run, world, scaler, step + 1, ++rollbacks);
      data_skip = at.data_skip, skipped = at.skipped;
      log.rewind(at.step);
      logged = Logged{};
      step = at.step - 1;  // the loop's ++step: the step after the checkpoint's
      continue;
    }
    const bool skip_spike = spike && cfg.health.on_spike != "warn";
    const Overflow nonfinite = run.first_overflow(loss_nonfinite);  // Inf/NaN on any rank: skip the step
    const int overflow = nonfinite.rank;
    const double rate = lr.at(step + 1 - skipped);  // skipped steps do not advance the schedule (Megatron)
    double norm = std::numeric_limits<double>::quiet_NaN();
    if (overflow < 0 && !skip_spike) {
      norm = run.grad_norm() / scale;
      run.optimizer_step(static_cast<float>(rate), norm, static_cast<float>(1.0 / scale));
      if (const Fault* f = faults.find(FaultKind::bitflip, rank, step + 1)) flip_a_bit(*f, run, step + 1);
    } else {
      ++skipped;
    }
    if (scaler) {
      scaler->update(overflow >= 0);
      if (overflow >= 0 && rank0)
        spdlog::warn("step {} skipped: gradients overflowed (Inf/NaN, first seen on rank {}) at loss scale {:g}; "
                     "scale now {:g}",
                     step + 1, overflow, scale, scaler->scale());
    } else {
      nonfinite_in_a_row = overflow >= 0 ? nonfinite_in_a_row + 1 : 0;
      if (overflow >= 0 && rank0)
        spdlog::warn("NONFINITE step={} origin_rank={} where={} skipped={}/{}: Inf/NaN, the update is skipped", step + 1,
                     overflow, nonfinite.where, nonfinite_in_a_row, cfg.train.max_consecutive_skips);
      if (nonfinite_in_a_row == cfg.train.max_consecutive_skips)
        throw NonFiniteSteps(fmt::format(
            "{} steps in a row (to step {}) had Inf/NaN gradients (first seen on rank {}): training has diverged; "
            "resume from an earlier checkpoint with a lower optimizer.lr, or raise train.max_consecutive_skips",
            nonfinite_in_a_row, step + 1, overflow));
    }
    replicas.after_step(step + 1);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    // The expert-data-parallel reduction of expert gradients counts as data-parallel communication.
    CommStats dp = run.groups.dp().stats();
    dp += run.groups.edp().stats();
    // hpZ's gathers within a host group are data-parallel communication too ([Note: ZeRO++]).
    const CommStats hpz_stats = hpz ? run.optim_groups().front().zero().hpz_comm().stats() : CommStats{};
    dp += hpz_stats;
    logged.hpz_bytes += hpz_stats.bytes_moved;
    const CommStats tp = run.groups.tp().stats(), pp = run.groups.pp().stats(), ep = run.groups.ep().stats();
    const double waited_ms =
        dp.exposed_ms + tp.exposed_ms + pp.exposed_ms + ep.exposed_ms + world.stats().exposed_ms;
    progress.set_loss(loss);
    watchdog.step_done(dt, world);
    stragglers.step_done(step + 1, dt * 1e3 - waited_ms, waited_ms);
    links.step_done(step + 1);
    const double t_begin = std::chrono::duration<double>(t0.time_since_epoch()).count();
    timeline.step(step + 1, t_begin, t_begin + dt, dt * 1e3 - waited_ms, waited_ms);
    result.losses.push_back(loss);
    result.grad_norms.push_back(norm);
    logged.add(dt, dp, tp, pp, ep);
    if (step == start_step) {
      log.memory(step + 1, run.memory());
      StartupTimes::instance().mark("first step");
      if (rank0) spdlog::info("{}", StartupTimes::instance().summary());
    }
    const bool last = step + 1 == cfg.train.steps;
    if ((step + 1) % cfg.log.interval == 0 || last) {
      const auto n = static_cast<double>(logged.steps);
      const double avg = logged.time / n;
      StepMetrics m;
      m.step = step + 1;
      m.steps = cfg.train.steps;
      m.loss = loss;
      m.lr = rate;
      m.grad_norm = norm;
      m.step_time_ms = avg * 1e3;
      m.tokens_per_s = static_cast<double>(run.tokens_per_step()) / avg;
      m.comm_ms = logged.dp.busy_ms / n;
      m.exposed_comm_ms = logged.dp.exposed_ms / n;
      m.comm_bytes = static_cast<double>(logged.dp.bytes_moved) / n;
      m.hpz_comm_bytes = static_cast<double>(logged.hpz_bytes) / n;
      m.tp_comm_ms = logged.tp.busy_ms / n;
      m.tp_exposed_ms = logged.tp.exposed_ms / n;
      m.pp_comm_ms = logged.pp.busy_ms / n;
      // Every stage's idle time (blocked on its neighbours), gathered over the pipeline group.
      m.pp_idle_ms.assign(static_cast<size_t>(run.groups.pp().size()), 0.0);
      m.pp_idle_ms[static_cast<size_t>(run.groups.pp().rank())] = logged.pp.exposed_ms / n;
      if (run.groups.pp().size() > 1) run.groups.pp().all_reduce(m.pp_idle_ms.data(), run.groups.pp().size()).wait();
      m.ep_comm_ms = logged.ep.busy_ms / n;
      m.ep_exposed_ms = logged.ep.exposed_ms / n;
      m.moe_dispatch_ms = run.moe_dispatch_ms() / n;
      m.compute_ms =
          m.step_time_ms - m.exposed_comm_ms - m.tp_exposed_ms - m.ep_exposed_ms - logged.pp.exposed_ms / n;
      m.memory = run.memory();
      m.precision = precision_name(cfg.train.precision);
      if (scaler) m.loss_scale = scale;
      m.skipped_steps = skipped;
      m.moe = moe_metrics(run.moe_stats(), logged.steps);
      m.mfu = peak.at(flops_per_step / avg / world.size());
      m.eta_s = std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(step + 1 - start_step) *
                static_cast<double>(cfg.train.steps - step - 1);
      log.step(m);
      logged = Logged{};
    }
    // Periodic saves skip while an asynchronous one is still being written; the run's last waits.
    const auto save = [&](Checkpointer::IfBusy if_busy) {
      progress.enter(Section::checkpoint, step + 1);
      TrainState ts{step + 1, (step + 1 + data_skip) * G, cfg.train.seed, skipped};
      if (scaler) {
        const LossScaleState& l = scaler->state();
        ts.loss_scale = l.scale, ts.loss_scale_growth_tracker = l.growth_tracker;
        ts.loss_scale_hysteresis_tracker = l.hysteresis_tracker;
      }
      // Taken now: on a device, the host copy of this step's state (rank_run.h [Note: a run on a device]).
      const bool done = checkpointer->save([&] { return run.checkpoint_tensors(); }, ts, if_busy);
      have_checkpoint = have_checkpoint || done;
      return done;
    };
    const bool saved = checkpointer && cfg.checkpoint.save_interval > 0 &&
                       (step + 1) % cfg.checkpoint.save_interval == 0 &&
                       save(last ? Checkpointer::IfBusy::wait : Checkpointer::IfBusy::skip);
    if (run.data.valid() && cfg.train.eval_interval > 0 && ((step + 1) % cfg.train.eval_interval == 0 || last)) {
      progress.enter(Section::eval, step + 1);
      const double v = run.evaluate();
      result.val_losses.push_back(v);
      log.validation(step + 1, v);
    }
    if (last) break;
    if (const std::string why = stop.agree(step + 1 - start_step); !why.empty()) {
      spdlog::warn("STOP_REQUESTED step={} reason={}: {}", step + 1, why,
                   checkpointer ? "saving, then exiting with code 10" : "checkpoint.dir is empty: exiting unsaved");
      if (checkpointer && !saved) save(Checkpointer::IfBusy::wait);
      result.stopped_at = step + 1;
      break;
    }
  }
  progress.enter(Section::checkpoint, progress.step());
  run.stale_discard();  // a stop between two horizons leaves later steps' reductions in flight
  if (checkpointer) checkpointer->wait();
  return result;
}

}  // namespace megatrain
