#include "trainer/run_state.h"

#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_dir.h"
#include "trainer/memory_recovery.h"
#include "trainer/step_types.h"

namespace megatrain {
namespace {

// Takes over a loaded checkpoint's state: the optimizer's update count, the loss scaler, the data
// position (checked against the global batch size and the batches the loader reserves).
void adopt(const CheckpointMeta& meta, const Config& cfg, RankRun& run, RunState& at, bool rank0) {
  run.state_written();
  const int64_t step = meta.state.step, consumed = meta.state.consumed_samples;
  const BatchSizes& sizes = run.data().train().sizes();
  const std::optional<int64_t> batch = sizes.batch_starting_at(consumed);
  MT_INPUT_CHECK(batch && *batch >= step,
                 "{}: the checkpoint consumed {} samples in {} steps, which train.global_batch_size = {}{} cannot "
                 "produce; resume with the global batch size (and ramp) it was trained with",
                 cfg.source, consumed, step, cfg.train.global_batch_size,
                 cfg.train.rampup_batch_size.empty() ? std::string()
                                                     : fmt::format(" with train.rampup_batch_size = [{}]",
                                                                   fmt::join(cfg.train.rampup_batch_size, ", ")));
  const int64_t data_skip = *batch - step;
  MT_INPUT_CHECK(data_skip <= batches_reserved_for_rollbacks(cfg.health),
                 "{}: the checkpoint's data position is {} batches past its step (spike rollbacks skipped them), "
                 "more than the {} batches the data loader reserves for skips; set health.on_spike = \"rollback\" "
                 "with spike_skip_batches × spike_max_rollbacks at least that",
                 cfg.source, data_skip, batches_reserved_for_rollbacks(cfg.health));
  MT_INPUT_CHECK(step <= cfg.train.steps, "{}: the checkpoint is at step {}, beyond train.steps = {}", cfg.source, step,
                 cfg.train.steps);
  if (meta.state.seed != cfg.train.seed && rank0)
    spdlog::warn("checkpoint was trained with seed {}, continuing with train.seed = {}: data order and dropout change",
                 meta.state.seed, cfg.train.seed);
  at.step = step, at.data_skip = data_skip, at.skipped = meta.state.skipped_steps, at.loaded = true;
  run.set_step_count(step - at.skipped);
  if (at.scaler && meta.state.loss_scale > 0.0)
    at.scaler->restore({meta.state.loss_scale, meta.state.loss_scale_growth_tracker,
                        meta.state.loss_scale_hysteresis_tracker});
}

}  // namespace

TrainState RunState::saved(int64_t done, const Config& cfg, const BatchSizes& sizes) const {
  TrainState ts{done, sizes.first_sample(done + data_skip), cfg.train.seed, skipped};
  if (scaler) {
    const LossScaleState& l = scaler->state();
    ts.loss_scale = l.scale, ts.loss_scale_growth_tracker = l.growth_tracker;
    ts.loss_scale_hysteresis_tracker = l.hysteresis_tracker;
  }
  return ts;
}

RunState resume(const Config& cfg, const CheckpointTensors& state, RankRun& run, const Comm& world,
                bool allow_fresh_start) {
  const bool rank0 = world.rank() == 0;
  RunState at;
  if (cfg.train.precision == Precision::fp16) at.scaler.emplace(cfg.loss_scale);
  if (cfg.checkpoint.memory_interval > 0 && cfg.checkpoint.load == "latest") {
    const std::vector<int64_t> stored = committed_steps(cfg.checkpoint.dir);
    if (auto meta = load_memory_snapshot(cfg, state, world, stored.empty() ? 1 : stored.back())) {
      adopt(*meta, cfg, run, at, rank0);
      at.from_latest = !stored.empty();
      at.from_memory = true;
      return at;
    }
  }
  if (auto meta = checkpoint_load(cfg, state, world, allow_fresh_start, rank0)) {
    adopt(*meta, cfg, run, at, rank0);
    at.from_latest = cfg.checkpoint.load == "latest";
  } else {
    run.initialise();  // also over what a load that failed part-way wrote
  }
  return at;
}

void roll_back(const Config& cfg, const CheckpointTensors& state, RankRun& run, const Comm& world, RunState& at,
               int64_t spike_step) {
  const bool rank0 = world.rank() == 0;
  if (++at.rollbacks > cfg.health.spike_max_rollbacks)
    throw NonFiniteSteps(fmt::format(
        "loss spike at step {} after {} rollbacks (health.spike_max_rollbacks): training keeps diverging; resume from "
        "an earlier checkpoint with a lower optimizer.lr",
        spike_step, at.rollbacks - 1));
  Config latest = cfg;
  latest.checkpoint.load = "latest";
  adopt(*checkpoint_load(latest, state, world, false, false), cfg, run, at, rank0);
  const int64_t from = at.step + at.data_skip;
  at.data_skip += cfg.health.spike_skip_batches;
  if (rank0)
    spdlog::warn("LOSS_SPIKE_ROLLBACK step={} to_step={} skipped_batches={}..{} rollback={}/{}: back to the checkpoint "
                 "of step {}, training on from global batch {}",
                 spike_step, at.step, from + 1, from + cfg.health.spike_skip_batches, at.rollbacks,
                 cfg.health.spike_max_rollbacks, at.step, at.step + at.data_skip + 1);
}

}  // namespace megatrain
