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

}  // namespace megatrain
