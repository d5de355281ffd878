// The config's field table, shared by reading (config/config.cpp) and printing
// (config/config_toml.cpp): every key in printing order, the spellings of enum values, and the
// TOML text of strings and floats.
#pragma once
#include <fmt/format.h>

#include <span>
#include <string>
#include <string_view>

#include "config/config.h"

namespace megatrain::config_fields {

template <class E>
struct Spelling {
  E value;
  std::string_view name;
};
constexpr Spelling<NormKind> kNormSpellings[] = {{NormKind::layernorm, "layernorm"}, {NormKind::rmsnorm, "rmsnorm"}};
constexpr Spelling<PositionKind> kPositionSpellings[] = {{PositionKind::learned, "learned"},
                                                         {PositionKind::rope, "rope"}};
constexpr Spelling<RopeScaling> kRopeScalingSpellings[] = {{RopeScaling::none, "none"},
                                                           {RopeScaling::linear, "linear"},
                                                           {RopeScaling::llama3, "llama3"},
                                                           {RopeScaling::yarn, "yarn"}};
constexpr Spelling<ActivationKind> kActivationSpellings[] = {{ActivationKind::gelu, "gelu"},
                                                             {ActivationKind::swiglu, "swiglu"}};
constexpr Spelling<Precision> kPrecisionSpellings[] = {
    {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}};
constexpr Spelling<Device> kDeviceSpellings[] = {{Device::cpu, "cpu"}, {Device::cuda, "cuda"}};
constexpr Spelling<AttentionImpl> kAttentionSpellings[] = {
    {AttentionImpl::automatic, "auto"}, {AttentionImpl::flash, "flash"}, {AttentionImpl::cudnn, "cudnn"}};
constexpr Spelling<Recompute> kRecomputeSpellings[] = {
    {Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}};
constexpr Spelling<DecayKind> kDecaySpellings[] = {
    {DecayKind::cosine, "cosine"}, {DecayKind::linear, "linear"}, {DecayKind::constant, "constant"},
    {DecayKind::wsd, "wsd"}};
constexpr Spelling<WsdShape> kWsdShapeSpellings[] = {{WsdShape::linear, "linear"},
                                                     {WsdShape::cosine, "cosine"},
                                                     {WsdShape::exponential, "exponential"},
                                                     {WsdShape::minus_sqrt, "minus_sqrt"}};
constexpr Spelling<RouterKind> kRouterSpellings[] = {{RouterKind::softmax, "softmax"},
                                                     {RouterKind::sigmoid, "sigmoid"}};
constexpr Spelling<DropPolicy> kDropPolicySpellings[] = {{DropPolicy::probs, "probs"},
                                                         {DropPolicy::position, "position"}};
constexpr Spelling<GradCompression> kGradCompressionSpellings[] = {
    {GradCompression::none, "none"}, {GradCompression::powersgd, "powersgd"}, {GradCompression::onebit, "onebit"}};
constexpr Spelling<CpComm> kCpCommSpellings[] = {{CpComm::ring, "ring"}, {CpComm::all_to_all, "all_to_all"}};
inline std::span<const Spelling<NormKind>> spellings(NormKind) { return kNormSpellings; }
inline std::span<const Spelling<PositionKind>> spellings(PositionKind) { return kPositionSpellings; }
inline std::span<const Spelling<ActivationKind>> spellings(ActivationKind) { return kActivationSpellings; }
inline std::span<const Spelling<RopeScaling>> spellings(RopeScaling) { return kRopeScalingSpellings; }
inline std::span<const Spelling<DecayKind>> spellings(DecayKind) { return kDecaySpellings; }
inline std::span<const Spelling<WsdShape>> spellings(WsdShape) { return kWsdShapeSpellings; }
inline std::span<const Spelling<Recompute>> spellings(Recompute) { return kRecomputeSpellings; }
inline std::span<const Spelling<Precision>> spellings(Precision) { return kPrecisionSpellings; }
inline std::span<const Spelling<Device>> spellings(Device) { return kDeviceSpellings; }
inline std::span<const Spelling<AttentionImpl>> spellings(AttentionImpl) { return kAttentionSpellings; }
inline std::span<const Spelling<RouterKind>> spellings(RouterKind) { return kRouterSpellings; }
inline std::span<const Spelling<DropPolicy>> spellings(DropPolicy) { return kDropPolicySpellings; }
inline std::span<const Spelling<GradCompression>> spellings(GradCompression) { return kGradCompressionSpellings; }
inline std::span<const Spelling<CpComm>> spellings(CpComm) { return kCpCommSpellings; }

// [Note: the field table] Every config key, in printing order. C is Config or const Config; V is
// called as v(section, key, field&). Adding a key here makes it parsed, checked and printed.
template <class C, class V>
void for_each_field(C& c, V&& v) {
  auto& m = c.model;
  v("model", "n_layers", m.n_layers), v("model", "d_model", m.d_model), v("model", "n_heads", m.n_heads);
  v("model", "n_kv_heads", m.n_kv_heads), v("model", "d_ff", m.d_ff), v("model", "vocab_size", m.vocab_size);
  v("model", "max_seq_len", m.max_seq_len), v("model", "norm", m.norm), v("model", "position", m.position);
  v("model", "activation", m.activation), v("model", "bias", m.bias), v("model", "qkv_bias", m.qkv_bias);
  v("model", "tie_embeddings", m.tie_embeddings), v("model", "dropout", m.dropout);
  v("model", "init_std", m.init_std), v("model", "norm_eps", m.norm_eps), v("model", "rope_theta", m.rope_theta);
  auto& r = m.rope_scaling;
  v("model", "rope_scaling", r.kind), v("model", "rope_factor", r.factor);
  v("model", "rope_low_freq_factor", r.low_freq_factor), v("model", "rope_high_freq_factor", r.high_freq_factor);
  v("model", "rope_original_max_len", r.original_max_len), v("model", "rope_beta_fast", r.beta_fast);
  v("model", "rope_beta_slow", r.beta_slow), v("model", "rope_attention_factor", r.attention_factor);
  // moe.layers is one key for two fields, so its field is the whole MoeConfig: an integer k sets
  // MoeConfig::every, an array of block indices MoeConfig::layers.
  auto& e = m.moe;
  v("moe", "n_experts", e.n_experts), v("moe", "top_k", e.top_k), v("moe", "layers", e);
  v("moe", "d_ff_expert", e.d_ff_expert), v("moe", "router", e.router), v("moe", "aux_loss_coef", e.aux_loss_coef);
  v("moe", "z_loss_coef", e.z_loss_coef), v("moe", "aux_free_bias", e.aux_free_bias);
  v("moe", "capacity_factor", e.capacity_factor), v("moe", "drop_policy", e.drop_policy);
  v("moe", "n_shared_experts", e.n_shared_experts), v("moe", "residual", e.residual);
  auto& p = c.parallel;
  v("parallel", "tp", p.tp), v("parallel", "pp", p.pp), v("parallel", "cp", p.cp), v("parallel", "ep", p.ep);
  v("parallel", "cp_comm", p.cp_comm), v("parallel", "dp", p.dp), v("parallel", "zero_stage", p.zero_stage);
  v("parallel", "bucket_size_mb", p.bucket_size_mb), v("parallel", "overlap_grad_reduce", p.overlap_grad_reduce);
  v("parallel", "sequence_parallel", p.sequence_parallel), v("parallel", "overlap_tp_comm", p.overlap_tp_comm);
  v("parallel", "pipeline_schedule", p.pipeline_schedule), v("parallel", "virtual_stages", p.virtual_stages);
  v("parallel", "pipeline_layers", p.pipeline_layers), v("parallel", "grad_reduce_dtype", p.grad_reduce_dtype);
  v("parallel", "grad_compression", p.grad_compression), v("parallel", "powersgd_rank", p.powersgd_rank);
  v("parallel", "max_staleness", p.max_staleness);
  v("parallel", "zero_quantized_weights", p.zero_quantized_weights);
  v("parallel", "zero_quantized_gradients", p.zero_quantized_gradients);
  v("parallel", "zero_hpz_partition_size", p.zero_hpz_partition_size);
  v("parallel", "zero_quant_block", p.zero_quant_block);
  auto& t = c.train;
  v("train", "seq_len", t.seq_len), v("train", "micro_batch_size", t.micro_batch_size);
  v("train", "global_batch_size", t.global_batch_size), v("train", "steps", t.steps);
  v("train", "seed", t.seed), v("train", "eval_interval", t.eval_interval);
  v("train", "eval_steps", t.eval_steps), v("train", "precision", t.precision), v("train", "device", t.device);
  v("train", "attention_backend", t.attention_backend), v("train", "recompute", t.recompute);
  v("train", "recompute_layers", t.recompute_layers), v("train", "bf16_activations", t.bf16_activations);
  v("train", "exit_duration_mins", t.exit_duration_mins), v("train", "exit_after_steps", t.exit_after_steps);
  v("train", "max_consecutive_skips", t.max_consecutive_skips), v("train", "rampup_batch_size", t.rampup_batch_size);
  auto& o = c.optimizer;
  v("optimizer", "lr", o.lr), v("optimizer", "min_lr", o.min_lr), v("optimizer", "beta1", o.beta1);
  v("optimizer", "beta2", o.beta2), v("optimizer", "eps", o.eps), v("optimizer", "weight_decay", o.weight_decay);
  v("optimizer", "grad_clip", o.grad_clip), v("optimizer", "warmup_steps", o.warmup_steps);
  v("optimizer", "decay", o.decay), v("optimizer", "decay_steps", o.decay_steps);
  v("optimizer", "wsd_decay_steps", o.wsd_decay_steps), v("optimizer", "wsd_decay_style", o.wsd_decay_style);
  v("optimizer", "decay_embeddings", o.decay_embeddings);
  v("optimizer", "decay_norms_and_biases", o.decay_norms_and_biases), v("optimizer", "state_dtype", o.state_dtype);
  v("data", "train", c.data.train), v("data", "valid", c.data.valid), v("data", "split", c.data.split);
  v("data", "shuffle", c.data.shuffle), v("data", "cache_dir", c.data.cache_dir);
  v("data", "reset_position_ids", c.data.reset_position_ids),
      v("data", "reset_attention_mask", c.data.reset_attention_mask);
  v("data", "eod_mask_loss", c.data.eod_mask_loss), v("data", "eod_token", c.data.eod_token);
  v("data", "pack", c.data.pack);
  auto& k = c.checkpoint;
  v("checkpoint", "dir", k.dir), v("checkpoint", "save_interval", k.save_interval);
  v("checkpoint", "keep_last", k.keep_last), v("checkpoint", "load", k.load), v("checkpoint", "async", k.async);
  v("checkpoint", "on_save_fail", k.on_save_fail), v("checkpoint", "memory_interval", k.memory_interval);
  v("checkpoint", "memory_dir", k.memory_dir), v("checkpoint", "memory_keep", k.memory_keep);
  v("log", "interval", c.log.interval), v("log", "metrics_file", c.log.metrics_file);
  v("log", "samples_file", c.log.samples_file);
  v("log", "peak_tflops", c.log.peak_tflops);
  auto& l = c.loss_scale;
  v("loss_scale", "initial_scale", l.initial_scale), v("loss_scale", "min_scale", l.min_scale);
  v("loss_scale", "growth_factor", l.growth_factor), v("loss_scale", "backoff_factor", l.backoff_factor);
  v("loss_scale", "growth_interval", l.growth_interval), v("loss_scale", "hysteresis", l.hysteresis);
  auto& h = c.health;
  v("health", "run_dir", h.run_dir), v("health", "watchdog", h.watchdog);
  v("health", "init_timeout_s", h.init_timeout_s), v("health", "step_timeout_floor_s", h.step_timeout_floor_s);
  v("health", "step_timeout_factor", h.step_timeout_factor), v("health", "calibrate_steps", h.calibrate_steps);
  v("health", "io_timeout_s", h.io_timeout_s), v("health", "heartbeat_interval_s", h.heartbeat_interval_s);
  v("health", "flight_recorder_entries", h.flight_recorder_entries), v("health", "timeline", h.timeline);
  v("health", "straggler_window", h.straggler_window), v("health", "straggler_threshold", h.straggler_threshold);
  v("health", "straggler_min_ms", h.straggler_min_ms), v("health", "straggler_windows", h.straggler_windows);
  v("health", "slow_step_factor", h.slow_step_factor), v("health", "replica_check_interval", h.replica_check_interval);
  v("health", "link_check_interval", h.link_check_interval);
  v("health", "spike_factor", h.spike_factor), v("health", "spike_window", h.spike_window);
  v("health", "on_spike", h.on_spike), v("health", "spike_skip_batches", h.spike_skip_batches);
  v("health", "spike_max_rollbacks", h.spike_max_rollbacks);
}

// A TOML basic string: quoted, with \\, \" and control characters escaped.
inline std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\')
      out += '\\', out += ch;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\u{:04X}", c);
    else
      out += ch;
  }
  return out + "\"";
}

// Shortest round-trip text that TOML reads back as a float (always has '.', 'e', "inf" or "nan").
template <class F>
std::string float_text(F x) {
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace megatrain::config_fields
