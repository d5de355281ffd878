#include "trainer/train.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "model/gpt.h"
#include "model/stage.h"
#include "model/optimizer.h"
#include "model/tp_shared.h"
#include "parallel/groups.h"
#include "parallel/pipeline.h"
#include "parallel/zero.h"
#include "trainer/checkpoint.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/peak_flops.h"
#include "trainer/train_data.h"

namespace megatrain {
namespace {

using Clock = std::chrono::steady_clock;

// The blocks pipeline stage `stage` of `stages` holds: parallel.pipeline_layers, or an even split
// (both checked by the config).
StageRange stage_range(const Config& c, int stage, int stages) {
  const std::vector<int>& given = c.parallel.pipeline_layers;
  int first = 0;
  for (int s = 0; s < stage; ++s) first += given.empty() ? c.model.n_layers / stages : given[static_cast<size_t>(s)];
  const int layers = given.empty() ? c.model.n_layers / stages : given[static_cast<size_t>(stage)];
  return {first, layers, stage == 0, stage + 1 == stages};
}

// Data, model and optimizer of one run: this rank's pipeline stage, its micro-batch steps, and the
// PipelineWork the executor drives (a forward loads the micro-batch; a backward is bracketed by
// ZeRO's micro-batch hooks).
struct Run : PipelineWork {
  const Config& cfg;
  ProcessGroups groups;
  const Comm& dp_comm;
  const Comm& tp_comm;
  const Comm& pp_comm;
  int dp_rank, dp;
  TrainData data;
  StageRange range;
  std::vector<PipeStep> steps;  // this stage's schedule of one training step
  ParamLayout layout;
  ParamLayout stored_layout;  // the global tensors checkpoints hold
  ZeroState zero;
  Stage model;
  TpSharedParams tp_shared;
  AdamW optimizer;
  PipelineExecutor pipeline;
  // The first and last stage when a tied embedding spans them (Megatron's embedding group), and
  // where this stage's embedding (or copy of it) lies in the layout.
  std::optional<Comm> embedding_comm;
  FlatRange embedding_range;
  std::vector<int32_t> inputs, targets;
  // The training step the executor is running: its number, loss sum, backwards (the weight steps,
  // when the schedule splits them) left.
  int64_t step_ = 0;
  double loss_sum_ = 0.0;
  int backwards_left_ = 0;
  bool evaluating_ = false;
  int64_t eval_batch_ = 0;

  Run(const Config& c, const Comm& world)
      : cfg(c), groups(world, parallel_dims(c)), dp_comm(groups.dp()), tp_comm(groups.tp()), pp_comm(groups.pp()),
        dp_rank(dp_comm.rank()), dp(dp_comm.size()), data(c, dp_rank, dp),
        range(stage_range(c, pp_comm.rank(), pp_comm.size())),
        steps(pipeline_schedule(c.parallel.pipeline_schedule, pp_comm.rank(),
                                PipeShape{pp_comm.size(), data.train().micro_batches_per_step(), 1})),
        layout(gpt_param_layout(c.model, TpCoord{tp_comm.rank(), tp_comm.size()}, c.parallel.sequence_parallel,
                                range)),
        stored_layout(gpt_param_layout(c.model)),
        zero(gpt_param_units(layout, range), dp_comm, zero_options(c)),
        model(c.model, c.train.micro_batch_size, c.train.seq_len, layout, range,
              StageOptions{peak_held(steps), splits_backward(steps), c.train.recompute, c.train.recompute_layers}, zero,
              TensorParallel(tp_comm, TpOptions{c.parallel.sequence_parallel, c.parallel.overlap_tp_comm},
                             int64_t{c.train.micro_batch_size} * c.train.seq_len, c.model.d_model)),
        tp_shared(layout, tp_comm),
        optimizer(layout, adamw_options(c), zero.optimizer_range(), zero.optimizer_padded()),
        pipeline(pp_comm, model.output(0).numel(), peak_held(steps)),
        inputs(static_cast<size_t>(c.train.micro_batch_size) * c.train.seq_len),
        targets(inputs.size()) {
    init_params_range(layout, zero.held_params(), zero.held_params_range(), c.model, c.train.seed);
    if (c.model.tie_embeddings && pp_comm.size() > 1) {
      const bool ends = range.embedding || range.head;
      Comm group = pp_comm.split(ends ? 0 : 1, pp_comm.rank(), "embedding");
      if (ends) {
        embedding_comm.emplace(std::move(group));
        const size_t i = layout.index_of("embed.wte");
        embedding_range = {layout.offset(i), layout.offset(i) + layout.local_shape(i).numel()};
        zero.hold(embedding_range);  // summed over the group before the data-parallel reduction
      }
    }
  }

  Tensor forward(int slot, int micro, Tensor input) override {
    const int B = cfg.train.micro_batch_size, G = cfg.train.global_batch_size;
    ForwardOptions opt;
    if (evaluating_) {
      data.valid()->load(eval_batch_, micro, inputs.data(), targets.data());
    } else {
      data.train().load(step_, micro, inputs.data(), targets.data());
      opt.grad = LossGrad::in_place;
      opt.dloss_scale = 1.0f / static_cast<float>(tokens_per_step());
      opt.dropout = true;
      opt.dropout_seed = cfg.train.seed;
      opt.first_sample = static_cast<uint64_t>(step_) * G + static_cast<uint64_t>(dp_rank) * (G / dp) +
                         static_cast<uint64_t>(micro) * B;
    }
    loss_sum_ += model.forward(slot, MicroBatch{inputs.data(), targets.data(), opt}, input);
    return model.output(slot);
  }

  Tensor backward(int slot, Tensor dout) override {
    if (splits_backward(steps)) return model.backward_input(slot, dout);  // ZeRO's hooks bracket weight()
    zero.micro_batch_begin(--backwards_left_ == 0);
    const Tensor din = model.backward(slot, dout);
    zero.micro_batch_end();
    return din;
  }

  void weight(int slot) override {
    zero.micro_batch_begin(--backwards_left_ == 0);
    model.backward_weights(slot);
    zero.micro_batch_end();
  }

  // The mean over the global batch of a loss summed on the last stages of the dp replicas.
  double mean_over_replicas(double sum, int micro) const {
    if (pp_comm.size() > 1) pp_comm.all_reduce(&sum, 1).wait();  // only the last stage's is not 0
    if (dp > 1) dp_comm.all_reduce(&sum, 1).wait();
    return sum / (micro * dp);
  }

  static ParallelDims parallel_dims(const Config& c) {
    const ParallelConfig& p = c.parallel;
    return ParallelDims{p.tp, p.cp, p.ep, p.dp, p.pp};
  }
  static ZeroOptions zero_options(const Config& c) {
    const auto floats = static_cast<int64_t>(c.parallel.bucket_size_mb * 1024.0 * 1024.0 / sizeof(float));
    return {c.parallel.zero_stage, std::max<int64_t>(1, floats), c.parallel.overlap_grad_reduce};
  }
  static AdamWOptions adamw_options(const Config& c) {
    const auto& o = c.optimizer;
    return {o.beta1, o.beta2, o.eps, o.weight_decay, o.grad_clip, o.decay_embeddings, o.decay_norms_and_biases};
  }

  int64_t tokens_per_step() const {
    return static_cast<int64_t>(cfg.train.global_batch_size) * cfg.train.seq_len;
  }

  // What a checkpoint holds of this rank's state (checkpoint/checkpoint_file.h).
  CheckpointTensors checkpoint_tensors() {
    const FlatRange held = zero.held_params_range(), opt = optimizer.range(), part = zero.partition();
    return {&layout,
            {zero.held_params(), held.begin, held.end},
            {optimizer.exp_avg(), opt.begin, opt.end},
            {optimizer.exp_avg_sq(), opt.begin, opt.end},
            part.begin,
            part.end,
            &stored_layout};
  }

  MemoryMetrics memory() const {
    const ZeroMemory z = zero.memory();
    return {z.params, z.grads, optimizer.state_bytes(), static_cast<int64_t>(model.activation_bytes()), z.comm_buffers};
  }

  // Forward + backward over this rank's micro-batches of `step` through the pipeline, gradients
  // reduced over the data-parallel ranks (parallel/zero.h). Returns the mean loss over the global batch.
  double train_step(int64_t step) {
    step_ = step;
    loss_sum_ = 0.0;
    backwards_left_ = data.train().micro_batches_per_step();
    zero.step_begin();
    pipeline.run(steps, *this);
    // The gradients of values held twice: a tied embedding's two copies (first and last stage)
    // summed over the embedding group before their bucket's data-parallel reduction (parallel/zero.h
    // [Note: held bucket]), so both stages reduce and update the same values at any ZeRO stage;
    // then partial ones summed over their tensor-parallel sharers.
    zero.reduce_held([&](float* g) { embedding_comm->all_reduce(g, embedding_range.size()).wait(); });
    tp_shared.reduce_partial_grads(zero.optimizer_grads(), zero.optimizer_range());
    return mean_over_replicas(loss_sum_, data.train().micro_batches_per_step());
  }

  // Global L2 norm of the step's gradient: every global parameter counted once (model/tp_shared.h).
  double grad_norm() {
    const FlatRange range = zero.optimizer_range();
    double squares = zero.sum_over_partitions(tp_shared.sum_squares(zero.optimizer_grads(), range));
    if (tp_comm.size() > 1) tp_comm.all_reduce(&squares, 1).wait();
    if (pp_comm.size() > 1) pp_comm.all_reduce(&squares, 1).wait();  // each stage holds its own tensors
    return std::sqrt(squares);
  }

  // Mean loss over the first eval_steps global batches of the validation set (same each time).
  double evaluate() {
    const int micro = data.valid()->micro_batches_per_step();
    evaluating_ = true;
    loss_sum_ = 0.0;
    for (eval_batch_ = 0; eval_batch_ < cfg.train.eval_steps; ++eval_batch_) pipeline.run_forward(micro, *this);
    evaluating_ = false;
    return mean_over_replicas(loss_sum_, static_cast<int>(cfg.train.eval_steps) * micro);
  }
};

// Step time and communication summed over the steps since the last log line.
struct Logged {
  double time = 0.0;
  int64_t steps = 0;
  CommStats dp, tp, pp;
  void add(double dt, const CommStats& d, const CommStats& t, const CommStats& p) {
    time += dt;
    ++steps;
    dp += d;
    tp += t;
    pp += p;
  }
};

// log.peak_tflops as a number, or measured now ("auto") and logged.
double peak_tflops_per_rank(const Config& cfg, const Comm& world) {
  if (!cfg.log.peak_tflops.automatic) return cfg.log.peak_tflops.value;
  const PeakMeasurement p = measure_peak_tflops(world);
  if (world.rank() == 0)
    spdlog::info("MFU peak: measured {:.4g} GFLOP/s per rank (fp32 GEMM {}x{}x{} on {} threads, best of {}, mean "
                 "over {} ranks); log.peak_tflops = a number overrides it",
                 p.tflops_per_rank * 1e3, p.n, p.n, p.n, p.threads, p.repetitions, world.size());
  return p.tflops_per_rank;
}

}  // namespace

TrainResult run_training(const Config& cfg, const Comm& world, const TrainOptions& options) {
  const bool rank0 = world.rank() == 0;
  Run run(cfg, world);
  const CheckpointTensors state = run.checkpoint_tensors();
  const int64_t G = cfg.train.global_batch_size;
  int64_t start_step = 0;
  if (auto meta = checkpoint_load(cfg, state, world, options.allow_fresh_start, rank0)) {
    start_step = meta->state.step;
    MT_INPUT_CHECK(meta->state.consumed_samples == start_step * G,
                   "{}: the checkpoint consumed {} samples in {} steps, but train.global_batch_size = {} implies {}; "
                   "resume with the global batch size it was trained with",
                   cfg.source, meta->state.consumed_samples, start_step, G, start_step * G);
    MT_INPUT_CHECK(start_step <= cfg.train.steps, "{}: the checkpoint is at step {}, beyond train.steps = {}",
                   cfg.source, start_step, cfg.train.steps);
    if (meta->state.seed != cfg.train.seed && rank0)
      spdlog::warn("checkpoint was trained with seed {}, continuing with train.seed = {}: data order and dropout change",
                   meta->state.seed, cfg.train.seed);
    run.optimizer.set_step_count(start_step);
  }
  std::unique_ptr<Checkpointer> checkpointer;
  if (cfg.checkpoint.save_interval > 0) checkpointer = std::make_unique<Checkpointer>(cfg, world);
  if (rank0) {
    spdlog::info("model: {} parameters, {:.1f} MiB activations on rank 0; data: {} tokens, {} samples per epoch",
                 run.stored_layout.num_parameters(), static_cast<double>(run.model.activation_bytes()) / (1 << 20),
                 run.data.train_tokens(), run.data.train_samples_per_epoch());
    spdlog::info("{} micro-batches of {} per step per rank, tp = {}{}, pp = {} ({}, {} held on stage 0), dp = {}, "
                 "ZeRO stage {}, {} gradient buckets, {} tokens per step",
                 run.data.train().micro_batches_per_step(), cfg.train.micro_batch_size, run.tp_comm.size(),
                 cfg.parallel.sequence_parallel ? " (sequence parallel)" : "", run.pp_comm.size(),
                 cfg.parallel.pipeline_schedule, peak_held(run.steps), run.dp, cfg.parallel.zero_stage,
                 run.zero.buckets().size(), run.tokens_per_step());
  }
  const LrSchedule lr{cfg.optimizer.lr, cfg.optimizer.min_lr, cfg.optimizer.warmup_steps,
                      cfg.optimizer.decay_steps, cfg.optimizer.decay};
  const double flops_per_step =
      gpt_flops_per_token(cfg.model, cfg.train.seq_len) * static_cast<double>(run.tokens_per_step());
  const double peak_tflops = peak_tflops_per_rank(cfg, world);
  MetricsLog log(cfg.log.metrics_file, rank0, start_step);
  TrainResult result;
  Logged logged;
  const auto start = Clock::now();
  for (int64_t step = start_step; step < cfg.train.steps; ++step) {
    const auto t0 = Clock::now();
    run.dp_comm.reset_stats();
    run.tp_comm.reset_stats();
    run.pp_comm.reset_stats();
    const double loss = run.train_step(step);
    const double norm = run.grad_norm();
    const double rate = lr.at(step + 1);
    run.optimizer.step(run.zero.optimizer_params(), run.zero.optimizer_grads(), static_cast<float>(rate), norm);
    run.zero.step_end();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    result.losses.push_back(loss);
    result.grad_norms.push_back(norm);
    logged.add(dt, run.dp_comm.stats(), run.tp_comm.stats(), run.pp_comm.stats());
    if (step == start_step) log.memory(step + 1, run.memory());
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
      m.tp_comm_ms = logged.tp.busy_ms / n;
      m.tp_exposed_ms = logged.tp.exposed_ms / n;
      m.pp_comm_ms = logged.pp.busy_ms / n;
      // Every stage's idle time (blocked on its neighbours), gathered over the pipeline group.
      m.pp_idle_ms.assign(static_cast<size_t>(run.pp_comm.size()), 0.0);
      m.pp_idle_ms[static_cast<size_t>(run.pp_comm.rank())] = logged.pp.exposed_ms / n;
      if (run.pp_comm.size() > 1) run.pp_comm.all_reduce(m.pp_idle_ms.data(), run.pp_comm.size()).wait();
      m.compute_ms = m.step_time_ms - m.exposed_comm_ms - m.tp_exposed_ms - logged.pp.exposed_ms / n;
      m.memory = run.memory();
      if (peak_tflops > 0.0) m.mfu = flops_per_step / avg / world.size() / (peak_tflops * 1e12);
      m.eta_s = std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(step + 1 - start_step) *
                static_cast<double>(cfg.train.steps - step - 1);
      log.step(m);
      logged = Logged{};
    }
    if (checkpointer && (step + 1) % cfg.checkpoint.save_interval == 0) {
      const double stall = checkpointer->save(state, TrainState{step + 1, (step + 1) * G, cfg.train.seed});
      if (rank0) spdlog::info("checkpoint: step {} {} ({:.1f} ms stall)", step + 1,
                              cfg.checkpoint.async ? "copied, writing in the background" : "saved", stall * 1e3);
    }
    if (run.data.valid() && cfg.train.eval_interval > 0 && ((step + 1) % cfg.train.eval_interval == 0 || last)) {
      const double v = run.evaluate();
      result.val_losses.push_back(v);
      log.validation(step + 1, v);
    }
  }
  if (checkpointer) checkpointer->wait();
  return result;
}

}  // namespace megatrain
