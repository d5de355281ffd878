#include "model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernels/field_rules.h"

namespace megatrain {
namespace {

// [moe] against the rest of the architecture; a dense model (n_experts = 0) ignores it.
void validate_moe_architecture(const ModelConfig& m, const std::string& source) {
  const MoeConfig& e = m.moe;
  if (!e.enabled()) return;
  MT_INPUT_CHECK(e.top_k <= e.n_experts,
                 "{}: moe.top_k = {} exceeds moe.n_experts = {}: each token goes to top_k different experts; lower "
                 "top_k or add experts",
                 source, e.top_k, e.n_experts);
  for (size_t i = 0; i < e.layers.size(); ++i) {
    MT_INPUT_CHECK(e.layers[i] >= 0 && e.layers[i] < m.n_layers,
                   "{}: moe.layers[{}] = {} is not a block of the model: block indices run from 0 to "
                   "model.n_layers - 1 = {}; fix the entry or model.n_layers",
                   source, i, e.layers[i], m.n_layers - 1);
    MT_INPUT_CHECK(i == 0 || e.layers[i - 1] < e.layers[i],
                   "{}: moe.layers = [{}] must list blocks in strictly increasing order without repeats "
                   "(moe.layers[{}] = {} follows {}); sort the list and drop duplicates",
                   source, fmt::join(e.layers, ", "), i, e.layers[i], e.layers[i - 1]);
  }
}

// model.rope_scaling's parameters against each other and the rest of [model].
void validate_rope_scaling(const ModelConfig& m, const std::string& source) {
  const RopeScalingConfig& r = m.rope_scaling;
  if (r.kind == RopeScaling::none) return;
  MT_INPUT_CHECK(m.position == PositionKind::rope,
                 "{}: model.rope_scaling is set but model.position = \"learned\"; rope_scaling rescales RoPE's "
                 "frequencies, so set position = \"rope\" or rope_scaling = \"none\"",
                 source);
  MT_INPUT_CHECK(r.factor >= 1.0f,
                 "{}: model.rope_factor = {} must be at least 1 (how many times the context grew); set it to the "
                 "checkpoint's rope_scaling.factor",
                 source, r.factor);
  if (r.kind == RopeScaling::llama3) {
    MT_INPUT_CHECK(r.original_max_len > 0,
                   "{}: model.rope_scaling = \"llama3\" needs model.rope_original_max_len, the pretraining context "
                   "(Llama 3.1: 8192)",
                   source);
    MT_INPUT_CHECK(
        r.low_freq_factor > 0.0f && r.high_freq_factor > r.low_freq_factor,
        "{}: model.rope_low_freq_factor = {} and model.rope_high_freq_factor = {} must satisfy 0 < low < high "
        "(Llama 3.1: 1 and 4)",
        source, r.low_freq_factor, r.high_freq_factor);
  }
  if (r.kind == RopeScaling::yarn)
    MT_INPUT_CHECK(r.beta_slow > 0.0f && r.beta_fast > r.beta_slow,
                   "{}: model.rope_beta_fast = {} and model.rope_beta_slow = {} must satisfy 0 < beta_slow < beta_fast "
                   "(YaRN's defaults: 32 and 1)",
                   source, r.beta_fast, r.beta_slow);
}

}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& m) {
  const RopeScalingConfig& r = m.rope_scaling;
  RopeFrequencies f;
  f.theta = m.rope_theta;
  f.scaling = r.kind;
  f.factor = r.factor;
  f.original_len = r.original_max_len;
  f.low_freq_factor = r.low_freq_factor;
  f.high_freq_factor = r.high_freq_factor;
  if (r.kind != RopeScaling::yarn) return f;
  // The pairs j whose wavelength fits beta_fast (from ramp_low on: scaled) and beta_slow (up to
  // ramp_high: unscaled) rotations in the original context, as transformers' find_correction_range.
  const double D = m.head_dim(), original = r.original_max_len > 0 ? r.original_max_len : m.max_seq_len;
  const auto pair = [&](double rotations) {
    return D * std::log(original / (rotations * 2.0 * 3.14159265358979323846)) / (2.0 * std::log(f.theta));
  };
  f.ramp_low = std::max(std::floor(pair(r.beta_fast)), 0.0);
  f.ramp_high = std::min(std::ceil(pair(r.beta_slow)), D - 1.0);
  if (f.ramp_high == f.ramp_low) f.ramp_high += 0.001;  // transformers' guard against a zero-width ramp
  f.attention = r.attention_factor > 0.0f ? r.attention_factor
                                          : static_cast<float>(0.1 * std::log(static_cast<double>(r.factor)) + 1.0);
  return f;
}

void validate_model_fields(const ModelConfig& m, const std::string& source) {
  const FieldRules r{source};
  r.at_least("model.n_layers", m.n_layers, 1);
  r.at_least("model.d_model", m.d_model, 1);
  r.at_least("model.n_heads", m.n_heads, 1);
  r.at_least("model.n_kv_heads", m.n_kv_heads, 0, "(0 = same as model.n_heads)");
  r.at_least("model.d_ff", m.d_ff, 0, "(0 = derived from model.d_model)");
  r.at_least("model.vocab_size", m.vocab_size, 1);
  r.at_least("model.max_seq_len", m.max_seq_len, 1);
  r.unit_interval("model.dropout", m.dropout);
  r.positive("model.init_std", m.init_std);
  r.positive("model.norm_eps", m.norm_eps);
  r.positive("model.rope_theta", m.rope_theta);
  r.at_least("model.rope_original_max_len", m.rope_scaling.original_max_len, 0);
  r.at_least("model.rope_attention_factor", m.rope_scaling.attention_factor, 0.0f, "(0 = YaRN's 0.1·ln(factor) + 1)");

  const MoeConfig& e = m.moe;
  r.at_least("moe.n_experts", e.n_experts, 0, "(0 = a dense model)");
  r.at_least("moe.top_k", e.top_k, 1);
  r.at_least("moe.layers", e.every, 1, "(an integer k makes blocks 0, k, 2k, … MoE blocks)");
  r.at_least("moe.d_ff_expert", e.d_ff_expert, 0, "(0 = the dense MLP width)");
  r.at_least("moe.aux_loss_coef", e.aux_loss_coef, 0.0f, "(0 = no load-balancing loss)");
  r.at_least("moe.z_loss_coef", e.z_loss_coef, 0.0f, "(0 = no router z-loss)");
  r.at_least("moe.aux_free_bias", e.aux_free_bias, 0.0f, "(0 = off)");
  r.at_least("moe.capacity_factor", e.capacity_factor, 0.0f, "(0 = dropless)");
  r.at_least("moe.n_shared_experts", e.n_shared_experts, 0);
}

void validate_model_config(const ModelConfig& m, const std::string& source) {
  validate_model_fields(m, source);
  MT_INPUT_CHECK(m.d_model % m.n_heads == 0,
                 "{}: model.n_heads = {} does not divide model.d_model = {}; pick n_heads from the divisors of d_model",
                 source, m.n_heads, m.d_model);
  MT_INPUT_CHECK(m.n_heads % m.kv_heads() == 0,
                 "{}: model.n_kv_heads = {} does not divide model.n_heads = {}; pick n_kv_heads from the divisors of "
                 "n_heads (0 = n_heads)",
                 source, m.n_kv_heads, m.n_heads);
  MT_INPUT_CHECK(m.position != PositionKind::rope || m.head_dim() % 2 == 0,
                 "{}: model.position = \"rope\" needs an even head dimension, but model.d_model / model.n_heads = "
                 "{} / {} = {}; change d_model or n_heads",
                 source, m.d_model, m.n_heads, m.head_dim());
  validate_rope_scaling(m, source);
  validate_moe_architecture(m, source);
}

}  // namespace megatrain
