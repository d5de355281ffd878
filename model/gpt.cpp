#include "model/gpt.h"

namespace megatrain {

GptModel::GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len)
    : layout_(gpt_param_layout(cfg)), params_(layout_.total()), grads_(layout_.total()),
      state_(gpt_param_units(layout_, whole_model(cfg)), params_.data(), grads_.data()),
      experts_(moe_expert_units(layout_, {whole_model(cfg)}), params_.data(), grads_.data()),
      stage_(cfg, micro_batch_size, seq_len, layout_, whole_model(cfg), StageOptions{}, state_,
             TensorParallel(static_cast<int64_t>(micro_batch_size) * seq_len, cfg.d_model), StageExperts{&experts_, {}}) {
  float* p = params_.data();
  for (int l = 0; l < cfg.n_layers; ++l) {
    const BlockParamIndex index = block_param_index(layout_, l);
    blocks_.push_back(block_weights(layout_, index, p, 0));
    if (blocks_.back().moe) bind_expert_weights(blocks_.back(), layout_, index, p, 0);
  }
  wte_ = layout_.view(p, layout_.index_of("embed.wte"));
  if (layout_.contains("embed.wpe")) wpe_ = layout_.view(p, layout_.index_of("embed.wpe"));
  head_ = cfg.tie_embeddings ? wte_ : layout_.view(p, layout_.index_of("lm_head.weight"));
  final_norm_.weight = layout_.view(p, layout_.index_of("final_norm.weight"));
  if (layout_.contains("final_norm.bias")) final_norm_.bias = layout_.view(p, layout_.index_of("final_norm.bias"));
}

void GptModel::zero_grads() {
  float* g = grads();
  const int64_t n = grads_.size();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
}

double gpt_flops_per_token(const ModelConfig& cfg, int seq_len) {
  // 6 FLOPs per weight per token (2 forward, 4 backward) for every matrix multiply, including
  // the LM head; attention scores and weighted sum: 2·2·T·d per layer forward, halved for the
  // causal mask, ×3 for forward + backward. Embedding lookups and norms are not counted.
  const double C = cfg.d_model, L = cfg.n_layers, D = cfg.head_dim();
  const double H = cfg.n_heads, Hkv = cfg.kv_heads(), F = cfg.ffn_dim();
  const double fc_out = cfg.activation == ActivationKind::swiglu ? 2 * F : F;
  const double per_layer = C * (H + 2 * Hkv) * D + H * D * C + C * fc_out + F * C;
  const double matmul_weights = L * per_layer + static_cast<double>(cfg.padded_vocab(1)) * C;
  const double attention = L * 3.0 * (2.0 * 2.0 * seq_len * H * D) / 2.0;
  return 6.0 * matmul_weights + attention;
}

}  // namespace megatrain
