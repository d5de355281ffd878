#include "model/config.h"

#include "kernels/field_rules.h"

namespace megatrain {

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
}

}  // namespace megatrain
