#include "model/flops.h"

namespace megatrain {

double block_forward_flops(const ModelConfig& m, int layer, int seq_len) {
  const double C = m.d_model, D = m.head_dim(), H = m.n_heads, Hkv = m.kv_heads();
  const auto mlp = [&](double F) { return C * (m.activation == ActivationKind::swiglu ? 2 * F : F) + F * C; };
  double weights = C * (H + 2 * Hkv) * D + H * D * C;
  if (m.moe.is_moe_layer(layer)) {
    const double E = m.expert_ffn_dim();
    weights += m.moe.top_k * mlp(E) + m.moe.n_shared_experts * mlp(E) + C * m.moe.n_experts;
    if (m.moe.residual) weights += mlp(m.ffn_dim());
  } else {
    weights += mlp(m.ffn_dim());
  }
  return 2.0 * weights + 2.0 * 2.0 * seq_len * H * D / 2.0;
}

double model_flops_per_token(const ModelConfig& m, int seq_len) {
  double forward = 2.0 * static_cast<double>(m.padded_vocab(1)) * m.d_model;  // the LM head
  for (int l = 0; l < m.n_layers; ++l) forward += block_forward_flops(m, l, seq_len);
  return 3.0 * forward;
}

}  // namespace megatrain
