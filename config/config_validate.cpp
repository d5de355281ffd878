// The rules a Config must satisfy: single-field rules (validate_config_fields, run by load_config)
// and cross-field rules with the derived values (resolve_config, run before any allocation).
// Every message names the config file, the key(s) and what to change.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "config/config.h"
#include "config/optim_groups.h"
#include "config/train_batches.h"
#include "data/doc_split.h"
#include "kernels/check.h"
#include "kernels/field_rules.h"
#include "model/params.h"
#include "parallel/groups.h"
#include "parallel/pipeline_schedule.h"

namespace megatrain {
namespace {

// Whether the dense parameters' ZeRO options break the rule of `what` (optim/zero_plan.h
// zero_options_problems, the one list of which options combine); each check below words it in
// config keys.
bool refuses(const Config& c, ZeroSwitch what) {
  for (const ZeroProblem& p : zero_options_problems(zero_options(c), c.parallel.dp * c.parallel.cp))
    if (p.what == what) return true;
  return false;
}

// [moe] settings that model/config.h describes but the MoE layer does not build yet: refused here,
// in one place, so that each is deleted with the commit that builds it.
// Expert parallelism splits the experts of every MoE block over the ep ranks of a data-parallel
// group; that dp divides by ep is resolve_dims' rule.
void check_expert_parallel(const Config& c) {
  const std::string& f = c.source;
  const int ep = c.parallel.ep, n = c.model.moe.n_experts;
  if (ep == 1) return;
  MT_INPUT_CHECK(n > 0, "{}: parallel.ep = {} splits experts, but [moe] n_experts = 0: the model has none; set "
                 "moe.n_experts to a multiple of ep, or parallel.ep = 1", f, ep);
  MT_INPUT_CHECK(n % ep == 0, "{}: parallel.ep = {} does not divide moe.n_experts = {}: every expert-parallel rank "
                 "holds n_experts / ep whole experts; pick ep from the divisors of n_experts", f, ep, n);
}

// Context parallelism (parallel/context_parallel.h, model/ring_attention.h, model/ulysses_attention.h): the balanced split
// needs 2·cp equal chunks per sequence; what is not built with it yet is refused naming the fix.
void check_context_parallel(const Config& c) {
  const std::string& f = c.source;
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const int T = c.train.seq_len, cp = p.cp;
  MT_INPUT_CHECK(T % (2 * cp) == 0,
                 "{}: parallel.cp = {} cuts every sequence into 2·cp = {} equal chunks (each rank holds an early and "
                 "a late one, so causal attention costs every rank the same), but train.seq_len = {} is not a "
                 "multiple of {}; set seq_len to a multiple of {} or pick another cp",
                 f, cp, 2 * cp, T, 2 * cp, 2 * cp);
  MT_INPUT_CHECK(!p.sequence_parallel || T % (2 * cp * p.tp) == 0,
                 "{}: parallel.sequence_parallel with cp = {} and tp = {} splits each rank's chunks over tp: "
                 "train.seq_len = {} must be a multiple of 2·cp·tp = {}",
                 f, cp, p.tp, T, 2 * cp * p.tp);
  if (p.cp_comm == CpComm::all_to_all) {
    const LocalDims L = local_dims(m, TpCoord{0, p.tp});
    MT_INPUT_CHECK(L.heads % cp == 0 && L.kv_heads % cp == 0,
                   "{}: parallel.cp_comm = \"all_to_all\" gives each cp rank n_heads/cp of a tensor-parallel rank's "
                   "{} query and {} key/value heads, but cp = {} does not divide both; use cp_comm = \"ring\" "
                   "(any head count), or a cp that divides them",
                   f, L.heads, L.kv_heads, cp);
  }
}

// train.device = "cuda" (trainer/rank_run.h [Note: a run on a device]): what runs on a device so far.
// Each refusal names what to change; a setting is deleted from the list when its device path lands.
void check_device(const Config& c) {
  const std::string& f = c.source;
  const ParallelConfig& p = c.parallel;
  MT_INPUT_CHECK(c.train.device == Device::cuda || c.train.attention_backend != AttentionImpl::cudnn,
                 "{}: train.attention_backend = \"cudnn\" is cuDNN's attention on a GPU, but train.device = \"cpu\"; "
                 "set train.device = \"cuda\", or attention_backend = \"auto\"",
                 f);
  if (c.train.device == Device::cpu) return;
  MT_INPUT_CHECK(c.optimizer.state_dtype == Precision::fp32,
                 "{}: optimizer.state_dtype = \"bf16\" is a CPU path so far (the CUDA AdamW kernel keeps float32 "
                 "moments); set optimizer.state_dtype = \"fp32\", or train.device = \"cpu\"",
                 f);
  MT_INPUT_CHECK(!refuses(c, ZeroSwitch::device),
                 "{}: train.device = \"cuda\" reduces gradients exactly so far, but parallel.grad_compression = "
                 "\"{}\", zero_quantized_weights = {}, zero_quantized_gradients = {}, zero_hpz_partition_size = {}, "
                 "max_staleness = {}; set \"none\", false, false, 1 and 0, or train.device = \"cpu\"",
                 f, grad_compression_name(p.grad_compression), p.zero_quantized_weights, p.zero_quantized_gradients,
                 p.zero_hpz_partition_size, p.max_staleness);
}

// ZeRO++ ([Note: ZeRO++] in optim/zero_plan.h): the combinations that are built. Expert parameters
// (MoE) keep the exact path, so these switches act on the dense parameters only.
void check_zeropp(const Config& c) {
  const std::string& f = c.source;
  const ParallelConfig& p = c.parallel;
  MT_INPUT_CHECK(!refuses(c, ZeroSwitch::qwz),
                 "{}: parallel.zero_quantized_weights = true (qwZ) quantizes the parameter all-gather of ZeRO "
                 "stages 1–3 with float32 parameters, but zero_stage = {} and train.precision = \"{}\"; set "
                 "zero_stage ≥ 1 and precision = \"fp32\", or zero_quantized_weights = false",
                 f, p.zero_stage, precision_name(c.train.precision));
  MT_INPUT_CHECK(!refuses(c, ZeroSwitch::qgz),
                 "{}: parallel.zero_quantized_gradients = true (qgZ) quantizes the float32 gradient reduce-scatter of "
                 "ZeRO stages 1–3, but zero_stage = {} and grad_reduce_dtype = \"{}\"; set zero_stage ≥ 1 and "
                 "grad_reduce_dtype = \"fp32\", or zero_quantized_gradients = false",
                 f, p.zero_stage, precision_name(p.grad_reduce_dtype));
  MT_INPUT_CHECK(!refuses(c, ZeroSwitch::hpz),
                 "{}: parallel.zero_hpz_partition_size = {} (hpZ) keeps a secondary parameter shard per group of that "
                 "many data-parallel ranks at ZeRO stage 3, so it needs zero_stage = 3 (got {}) and must divide "
                 "dp = {}; pick a divisor of dp (ranks per host), or 1 to turn hpZ off",
                 f, p.zero_hpz_partition_size, p.zero_stage, p.dp);
}

}  // namespace

void validate_config_fields(const Config& c) {
  FieldRules r{c.source};
  validate_model_fields(c.model, c.source);

  const ParallelConfig& p = c.parallel;
  r.at_least("parallel.tp", p.tp, 1);
  r.at_least("parallel.pp", p.pp, 1);
  r.at_least("parallel.virtual_stages", p.virtual_stages, 1);
  r.at_least("parallel.cp", p.cp, 1);
  r.at_least("parallel.ep", p.ep, 1);
  r.at_least("parallel.dp", p.dp, 0, "(0 = world size / (tp·cp·pp))");
  r.check(!refuses(c, ZeroSwitch::stage), "parallel.zero_stage", p.zero_stage, "0, 1, 2 or 3", "");
  r.positive("parallel.bucket_size_mb", p.bucket_size_mb);
  r.check(p.grad_reduce_dtype != Precision::fp16, "parallel.grad_reduce_dtype", "\"fp16\"", "\"fp32\" or \"bf16\"",
          "(fp16 sums of gradients overflow; bf16 keeps float32's range)");
  r.at_least("parallel.powersgd_rank", p.powersgd_rank, 1);
  r.at_least("parallel.max_staleness", p.max_staleness, 0, "(0 = synchronous)");
  r.at_least("parallel.zero_hpz_partition_size", p.zero_hpz_partition_size, 1, "(1 = off)");
  r.at_least("parallel.zero_quant_block", p.zero_quant_block, 1);

  const TrainConfig& t = c.train;
  r.at_least("train.seq_len", t.seq_len, 1);
  r.at_least("train.micro_batch_size", t.micro_batch_size, 1);
  r.at_least("train.global_batch_size", t.global_batch_size, 0, "(0 = micro_batch_size·dp)");
  r.at_least("train.steps", t.steps, int64_t{1});
  r.at_least("train.eval_interval", t.eval_interval, 0, "(0 = never)");
  r.at_least("train.eval_steps", t.eval_steps, 1);
  r.at_least("train.recompute_layers", t.recompute_layers, 0, "(0 = every block of a stage)");
  r.at_least("train.exit_duration_mins", t.exit_duration_mins, 0.0, "(0 = no time limit)");
  r.at_least("train.exit_after_steps", t.exit_after_steps, int64_t{0}, "(0 = no step limit)");
  r.at_least("train.max_consecutive_skips", t.max_consecutive_skips, int64_t{1});
  MT_INPUT_CHECK((t.exit_duration_mins == 0.0 && t.exit_after_steps == 0) || !c.checkpoint.dir.empty(),
                 "{}: train.exit_duration_mins / train.exit_after_steps stop the run to resume it later, which needs "
                 "a checkpoint: set checkpoint.dir",
                 c.source);
  for (size_t i = 0; i < p.pipeline_layers.size(); ++i)
    r.at_least(fmt::format("parallel.pipeline_layers[{}]", i), p.pipeline_layers[i], 1,
               "(every stage holds at least one block)");

  const OptimizerConfig& o = c.optimizer;
  r.at_least("optimizer.lr", o.lr, 0.0f);
  r.at_least("optimizer.min_lr", o.min_lr, 0.0f);
  r.unit_interval("optimizer.beta1", o.beta1);
  r.unit_interval("optimizer.beta2", o.beta2);
  r.positive("optimizer.eps", o.eps);
  r.at_least("optimizer.weight_decay", o.weight_decay, 0.0f);
  r.at_least("optimizer.grad_clip", o.grad_clip, 0.0f, "(0 = no clipping)");
  r.at_least("optimizer.warmup_steps", o.warmup_steps, int64_t{0});
  r.at_least("optimizer.decay_steps", o.decay_steps, int64_t{0}, "(0 = train.steps)");
  r.at_least("optimizer.wsd_decay_steps", o.wsd_decay_steps, int64_t{0});
  r.check(o.state_dtype != Precision::fp16, "optimizer.state_dtype", "\"fp16\"", "\"fp32\" or \"bf16\"",
          "(Adam's second moment, g², leaves fp16's range; bf16 keeps float32's)");

  MT_INPUT_CHECK(c.data.split.empty() || parse_doc_split(c.data.split),
                 "{}: data.split = \"{}\" must be 1 to 3 comma-separated non-negative numbers with a positive sum "
                 "(train, valid, test proportions of the documents), e.g. \"98,1,1\"; or \"\" for no split",
                 c.source, c.data.split);

  r.at_least("checkpoint.save_interval", c.checkpoint.save_interval, int64_t{0}, "(0 = never)");
  r.at_least("checkpoint.keep_last", c.checkpoint.keep_last, 0, "(0 = keep all)");
  r.at_least("checkpoint.memory_interval", c.checkpoint.memory_interval, int64_t{0}, "(0 = no memory snapshots)");
  r.at_least("checkpoint.memory_keep", c.checkpoint.memory_keep, 1, "");
  MT_INPUT_CHECK(c.checkpoint.memory_interval == 0 || !c.checkpoint.dir.empty(),
                 "{}: checkpoint.memory_interval = {} needs checkpoint.dir: it names the job's memory snapshots and "
                 "holds the storage checkpoints recovery falls back to; set checkpoint.dir",
                 c.source, c.checkpoint.memory_interval);
  MT_INPUT_CHECK(c.checkpoint.on_save_fail == "continue" || c.checkpoint.on_save_fail == "exit",
                 "{}: checkpoint.on_save_fail = \"{}\" must be \"continue\" (report a failed save and train on) or "
                 "\"exit\" (report it and exit with code 75 for the driver to restart)",
                 c.source, c.checkpoint.on_save_fail);

  const LossScaleOptions& l = c.loss_scale;
  r.positive("loss_scale.min_scale", l.min_scale);
  r.check(l.initial_scale >= l.min_scale, "loss_scale.initial_scale", l.initial_scale,
          fmt::format("at least loss_scale.min_scale = {}", l.min_scale), "");
  r.check(l.growth_factor > 1.0, "loss_scale.growth_factor", l.growth_factor, "greater than 1", "");
  r.check(l.backoff_factor > 0.0 && l.backoff_factor < 1.0, "loss_scale.backoff_factor", l.backoff_factor,
          "in (0, 1)", "");
  r.at_least("loss_scale.growth_interval", l.growth_interval, int64_t{1});
  r.at_least("loss_scale.hysteresis", l.hysteresis, int64_t{1});

  const HealthOptions& h = c.health;
  r.positive("health.init_timeout_s", h.init_timeout_s);
  r.positive("health.step_timeout_floor_s", h.step_timeout_floor_s);
  r.check(h.step_timeout_factor >= 1.0, "health.step_timeout_factor", h.step_timeout_factor, "at least 1", "");
  r.at_least("health.calibrate_steps", h.calibrate_steps, 1);
  r.positive("health.io_timeout_s", h.io_timeout_s);
  r.at_least("health.heartbeat_interval_s", h.heartbeat_interval_s, 0.0, "(0 = no heartbeats)");
  r.at_least("health.flight_recorder_entries", h.flight_recorder_entries, 1);
  r.at_least("health.straggler_window", h.straggler_window, 0, "(0 = off)");
  r.check(h.straggler_threshold > 0.0 && h.straggler_threshold < 1.0, "health.straggler_threshold",
          h.straggler_threshold, "in (0, 1)", "");
  r.at_least("health.straggler_min_ms", h.straggler_min_ms, 0.0);
  r.at_least("health.straggler_windows", h.straggler_windows, 1);
  r.at_least("health.replica_check_interval", h.replica_check_interval, int64_t{0}, "(0 = off)");
  r.at_least("health.link_check_interval", h.link_check_interval, int64_t{0}, "(0 = off)");
  r.check(h.spike_factor == 0.0 || h.spike_factor > 1.0, "health.spike_factor", h.spike_factor,
          "greater than 1, or 0 for no spike detection", "");
  r.at_least("health.spike_window", h.spike_window, 10);
  MT_INPUT_CHECK(h.on_spike == "warn" || h.on_spike == "skip" || h.on_spike == "rollback",
                 "{}: health.on_spike = \"{}\" must be \"warn\", \"skip\" or \"rollback\"", c.source, h.on_spike);
  r.at_least("health.spike_skip_batches", h.spike_skip_batches, int64_t{1});
  r.at_least("health.spike_max_rollbacks", h.spike_max_rollbacks, 1);
  MT_INPUT_CHECK(h.on_spike != "rollback" || (!c.checkpoint.dir.empty() && c.checkpoint.save_interval > 0),
                 "{}: health.on_spike = \"rollback\" goes back to the last checkpoint, but {}; set checkpoint.dir and "
                 "checkpoint.save_interval, or use on_spike = \"skip\"",
                 c.source, c.checkpoint.dir.empty() ? "checkpoint.dir is empty" : "checkpoint.save_interval is 0");
  r.check(h.slow_step_factor > 1.0, "health.slow_step_factor", h.slow_step_factor, "greater than 1", "");

  r.at_least("log.interval", c.log.interval, 1);
  if (!c.log.peak_tflops.automatic)
    r.at_least("log.peak_tflops", c.log.peak_tflops.value, 0.0, "(0 = MFU not reported; \"auto\" = measure it)");
}

void resolve_config(Config& c, int world_size) {
  const std::string& f = c.source;
  validate_config_fields(c);
  ModelConfig& m = c.model;
  // 1. Architecture.
  validate_model_config(m, f);
  MT_INPUT_CHECK(c.train.seq_len <= m.max_seq_len,
                 "{}: train.seq_len = {} exceeds model.max_seq_len = {}; lower train.seq_len or raise "
                 "model.max_seq_len",
                 f, c.train.seq_len, m.max_seq_len);
  MT_INPUT_CHECK(!(m.moe.residual && m.moe.n_shared_experts > 0),
                 "{}: moe.residual = true and moe.n_shared_experts = {} are two kinds of dense branch beside the "
                 "experts; keep one (residual MoE mixes its MLP by a learned coefficient, shared experts are added)",
                 f, m.moe.n_shared_experts);

  // 2. Layout.
  ParallelConfig& p = c.parallel;
  check_expert_parallel(c);
  MT_INPUT_CHECK(world_size >= 1, "{}: world size {} must be at least 1 (--world-size or the launcher's rank count)", f,
                 world_size);
  // The one world-size rule (parallel/groups.h): world = tp·cp·dp·pp, and ep divides dp.
  try {
    p.dp = resolve_dims(world_size, p.tp, p.cp, p.ep, p.pp, p.dp).dp;
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", f, e.what()));
  }

  // Tensor parallelism splits heads, key/value heads (or replicates them), MLP units (each
  // expert's too) and the (padded) vocabulary; sequence parallelism splits the rows of a micro-batch.
  if (p.tp > 1) {
    MT_INPUT_CHECK(m.n_heads % p.tp == 0,
                   "{}: parallel.tp = {} does not divide model.n_heads = {}: every tensor-parallel rank needs whole "
                   "attention heads; pick tp from the divisors of n_heads",
                   f, p.tp, m.n_heads);
    MT_INPUT_CHECK(m.kv_heads() % p.tp == 0 || p.tp % m.kv_heads() == 0,
                   "{}: parallel.tp = {} and model.n_kv_heads = {}: key/value heads are split when tp divides them "
                   "and replicated when they divide tp; pick tp so that one divides the other",
                   f, p.tp, m.kv_heads());
    MT_INPUT_CHECK(m.ffn_dim() % p.tp == 0,
                   "{}: parallel.tp = {} does not divide the MLP width {} (model.d_ff, or its default); set d_ff "
                   "to a multiple of tp",
                   f, p.tp, m.ffn_dim());
    MT_INPUT_CHECK(!m.moe.enabled() || m.expert_ffn_dim() % p.tp == 0,
                   "{}: parallel.tp = {} does not divide the expert MLP width {} (moe.d_ff_expert, or the dense "
                   "width when 0); set moe.d_ff_expert to a multiple of tp",
                   f, p.tp, m.expert_ffn_dim());
    MT_INPUT_CHECK(!p.sequence_parallel || int64_t{c.train.micro_batch_size} * c.train.seq_len % p.tp == 0,
                   "{}: parallel.sequence_parallel splits the micro_batch_size · seq_len = {} · {} rows of a "
                   "micro-batch over tp = {}; pick sizes whose product is a multiple of tp",
                   f, c.train.micro_batch_size, c.train.seq_len, p.tp);
  }

  if (p.cp > 1) check_context_parallel(c);

  // Pipeline parallelism splits the blocks evenly over pp stages; the micro-batches of a step go
  // through them by parallel.pipeline_schedule.
  MT_INPUT_CHECK(schedule_problem(p.pipeline_schedule, {p.pp, p.pp, 1}).empty(),
                 "{}: parallel.pipeline_schedule = \"{}\" is not one of \"gpipe\", \"1f1b\", \"interleaved\", "
                 "\"zero_bubble\"", f, p.pipeline_schedule);
  MT_INPUT_CHECK(p.virtual_stages == 1 || (p.pipeline_schedule == "interleaved" && p.pp > 1),
                 "{}: parallel.virtual_stages = {} needs parallel.pipeline_schedule = \"interleaved\" and pp > 1 "
                 "(got \"{}\", pp = {})", f, p.virtual_stages, p.pipeline_schedule, p.pp);
  MT_INPUT_CHECK(p.pipeline_schedule != "zero_bubble" || c.train.recompute == Recompute::none,
                 "{}: parallel.pipeline_schedule = \"zero_bubble\" with train.recompute: a weight-gradient step reads "
                 "the activations its micro-batch's backward used, so recomputed ones would be rebuilt twice; set "
                 "train.recompute = \"none\" or use the 1f1b schedule",
                 f);
  MT_INPUT_CHECK(!refuses(c, ZeroSwitch::deferred_grads),
                 "{}: parallel.pipeline_schedule = \"zero_bubble\" with parallel.zero_stage = {}: zero-bubble defers "
                 "each micro-batch's weight gradients past its backward, but ZeRO 2 and 3 reduce-scatter a "
                 "micro-batch's gradients as its backward ends; use zero_stage 0 or 1 with it",
                 f, p.zero_stage);
  // Gradient compression replaces stage 0's all-reduce of each float32 bucket (optim/zero_plan.h),
  // of the dense parameters only.
  MT_INPUT_CHECK(!refuses(c, ZeroSwitch::compression) && (p.grad_compression == GradCompression::none ||
                                                          m.moe.n_experts == 0),
                 "{}: parallel.grad_compression = \"{}\" compresses ZeRO stage 0's float32 all-reduce of a dense "
                 "model's gradients, but zero_stage = {}, grad_reduce_dtype = \"{}\", moe.n_experts = {}; set "
                 "zero_stage = 0 and grad_reduce_dtype = \"fp32\" on a dense model, or grad_compression = \"none\"",
                 f, grad_compression_name(p.grad_compression), p.zero_stage, precision_name(p.grad_reduce_dtype),
                 m.moe.n_experts);
  // Stale-synchronous training (optim/zero_plan.h [Note: bounded staleness]) is built for ZeRO
  // stage 0's float32 all-reduce of a dense model on data parallelism alone, in float32, with no
  // step that needs this step's reduced gradients at once (loss scaling, spike rollback).
  const bool stale_alone = m.moe.n_experts == 0 && p.tp == 1 && p.pp == 1 && p.cp == 1 &&
                           c.train.precision != Precision::fp16 && c.health.on_spike != "rollback";
  MT_INPUT_CHECK(!refuses(c, ZeroSwitch::staleness) && (p.max_staleness == 0 || stale_alone),
                 "{}: parallel.max_staleness = {} is built for ZeRO stage 0's float32 all-reduce of a dense model on "
                 "data parallelism alone, but zero_stage = {}, grad_reduce_dtype = \"{}\", grad_compression = \"{}\", "
                 "moe.n_experts = {}, tp = {}, pp = {}, cp = {}, train.precision = \"{}\", health.on_spike = \"{}\"; "
                 "set zero_stage = 0, grad_reduce_dtype = \"fp32\", grad_compression = \"none\", tp = pp = cp = 1 "
                 "on a dense model, precision \"fp32\" or \"bf16\" and on_spike \"warn\" or \"skip\", or "
                 "max_staleness = 0",
                 f, p.max_staleness, p.zero_stage, precision_name(p.grad_reduce_dtype),
                 grad_compression_name(p.grad_compression), m.moe.n_experts, p.tp, p.pp, p.cp,
                 precision_name(c.train.precision), c.health.on_spike);
  check_zeropp(c);
  check_device(c);
  const int stages = p.pp * p.virtual_stages;  // virtual stages
  if (!p.pipeline_layers.empty()) {
    int sum = 0;
    for (int n : p.pipeline_layers) sum += n;
    MT_INPUT_CHECK(static_cast<int>(p.pipeline_layers.size()) == stages && sum == m.n_layers,
                   "{}: parallel.pipeline_layers = [{}] must give each of the pp · virtual_stages = {} stages its "
                   "number of blocks, adding up to model.n_layers = {} (got {} entries adding up to {})",
                   f, fmt::join(p.pipeline_layers, ", "), stages, m.n_layers, p.pipeline_layers.size(), sum);
  }
  if (stages > 1) {
    MT_INPUT_CHECK(m.n_layers % stages == 0 || !p.pipeline_layers.empty(),
                   "{}: parallel.pp · virtual_stages = {} does not divide model.n_layers = {}: give the blocks of "
                   "each stage in parallel.pipeline_layers (e.g. [{}]), or pick sizes that divide n_layers",
                   f, stages, m.n_layers, fmt::join(std::vector<int>(static_cast<size_t>(stages), 1), ", "));
  }

  // 3. Batch: global = micro · dp · accumulation steps.
  TrainConfig& t = c.train;
  const int64_t per_step = int64_t{t.micro_batch_size} * p.dp;
  if (t.global_batch_size == 0) {
    MT_INPUT_CHECK(per_step <= INT32_MAX, "{}: train.micro_batch_size · dp = {} is too large; lower micro_batch_size",
                   f, per_step);
    t.global_batch_size = static_cast<int>(per_step);
  }
  check_train_batches(c);

  // 4. Learning-rate schedule.
  OptimizerConfig& o = c.optimizer;
  MT_INPUT_CHECK(o.min_lr <= o.lr, "{}: optimizer.min_lr = {} exceeds optimizer.lr = {}; set min_lr ≤ lr", f, o.min_lr,
                 o.lr);
  if (o.decay_steps == 0) o.decay_steps = t.steps;
  MT_INPUT_CHECK(o.warmup_steps <= o.decay_steps,
                 "{}: optimizer.warmup_steps = {} exceeds the decay steps = {} (optimizer.decay_steps, or train.steps "
                 "when 0); lower warmup_steps or raise decay_steps",
                 f, o.warmup_steps, o.decay_steps);
  MT_INPUT_CHECK(o.decay != DecayKind::wsd || (o.wsd_decay_steps >= 1 && o.wsd_decay_steps <= o.decay_steps - o.warmup_steps),
                 "{}: optimizer.decay = \"wsd\" needs optimizer.wsd_decay_steps, the steps of its final decay, from 1 to "
                 "the decay steps after warmup ({} − {} = {}); it is {}",
                 f, o.decay_steps, o.warmup_steps, o.decay_steps - o.warmup_steps, o.wsd_decay_steps);
  MT_INPUT_CHECK(o.decay == DecayKind::wsd || o.wsd_decay_steps == 0,
                 "{}: optimizer.wsd_decay_steps = {} is read by optimizer.decay = \"wsd\" only; drop it, or set decay "
                 "= \"wsd\"",
                 f, o.wsd_decay_steps);

  // 5. Features that need another key.
  MT_INPUT_CHECK(c.data.split.empty() || c.data.valid.empty(),
                 "{}: data.valid must be empty when data.split = \"{}\" is set (validation then comes from the "
                 "split's valid part of data.train); remove data.valid or set data.split = \"\"",
                 f, c.data.split);
  const bool split_valid = !c.data.split.empty() && (*parse_doc_split(c.data.split))[1] > 0.0;
  MT_INPUT_CHECK(t.eval_interval == 0 || !c.data.valid.empty() || split_valid,
                 "{}: train.eval_interval = {} needs validation data; set data.valid to a dataset prefix, a "
                 "data.split with a valid part (e.g. \"98,1,1\"), or train.eval_interval = 0",
                 f, t.eval_interval);
  MT_INPUT_CHECK(c.checkpoint.save_interval == 0 || !c.checkpoint.dir.empty(),
                 "{}: checkpoint.save_interval = {} needs checkpoint.dir; set checkpoint.dir or save_interval = 0", f,
                 c.checkpoint.save_interval);
  const DataConfig& d = c.data;
  const bool documents = d.reset_position_ids || d.reset_attention_mask || d.eod_mask_loss;
  MT_INPUT_CHECK(!documents || (d.eod_token >= 0 && d.eod_token < c.model.vocab_size),
                 "{}: data.reset_position_ids, reset_attention_mask and eod_mask_loss need data.eod_token, the "
                 "end-of-document id preprocess appended after each document (256 for the bytes tokenizer, a "
                 "tokenizer.json's <|endoftext|> id, e.g. 50256 for GPT-2), in [0, model.vocab_size = {}); got {}",
                 f, c.model.vocab_size, d.eod_token);
  MT_INPUT_CHECK(!d.reset_attention_mask || t.device == Device::cpu,
                 "{}: data.reset_attention_mask runs on the CPU backend only: the CUDA flash and cuDNN attention "
                 "kernels do not take document boundaries yet; set train.device = \"cpu\" or drop the option",
                 f);
}

Config config_for_model(const ModelConfig& m, const std::string& source) {
  Config c;
  c.model = m;
  c.source = source;
  c.train.seq_len = std::max(1, std::min(c.train.seq_len, m.max_seq_len));
  validate_config_fields(c);
  Config resolved = c;
  resolve_config(resolved, 1);
  return c;
}

}  // namespace megatrain
