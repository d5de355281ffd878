#include "model/config.h"

#include <fmt/format.h>

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

}  // namespace

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
  validate_moe_architecture(m, source);
}

}  // namespace megatrain
