// The two tiny architectures the model tests share — one per family — and seeded token streams.
#pragma once
#include <vector>

#include "kernels/rng.h"
#include "model/config.h"

namespace megatrain::test {

// GPT-2 family: layernorm, learned positions, gelu, biases, tied embeddings, dropout.
inline ModelConfig gpt2_like() {
  ModelConfig c;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 4;
  c.vocab_size = 37;
  c.max_seq_len = 16;
  c.dropout = 0.1f;
  return c;
}

// Llama family: rmsnorm, rope, swiglu, grouped-query attention, no biases, untied head.
inline ModelConfig llama_like() {
  ModelConfig c = gpt2_like();
  c.norm = NormKind::rmsnorm;
  c.position = PositionKind::rope;
  c.activation = ActivationKind::swiglu;
  c.n_kv_heads = 2;
  c.bias = false;
  c.tie_embeddings = false;
  c.dropout = 0.0f;
  return c;
}

// MoE on top of either family: 4 experts, top 2, block 0 MoE and block 1 dense (moe.every = 2); large initial weights so that routing choices are
// well separated (finite differences must not move a token to another expert).
inline ModelConfig moe_like(ModelConfig c, RouterKind router, float capacity_factor) {
  c.init_std = 0.2f;
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.moe.every = 2;
  c.moe.d_ff_expert = 24;
  c.moe.router = router;
  c.moe.capacity_factor = capacity_factor;
  c.moe.aux_loss_coef = 0.1f;
  c.moe.z_loss_coef = 0.01f;
  return c;
}

// moe_like with a dense branch beside the experts: `shared` shared experts, or residual MoE (0).
inline ModelConfig moe_branch_like(ModelConfig c, int shared) {
  c = moe_like(c, RouterKind::softmax, 0.0f);
  c.moe.n_shared_experts = shared;
  c.moe.residual = shared == 0;
  c.moe.aux_free_bias = 1e-3f;
  return c;
}

inline std::vector<int32_t> tokens(int n, int vocab, uint32_t stream) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  const RngKey k{9, static_cast<uint32_t>(RngPurpose::test), stream, 0};
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(rng_words(k, i)[0] % vocab);
  return t;
}

}  // namespace megatrain::test
