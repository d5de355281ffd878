// ModelConfig: the architecture of a decoder-only transformer (GPT-2 and Llama families).
// Pure data; parsed and validated by trainer/config.cpp. Invariant after validation:
// d_model % n_heads == 0, n_heads % n_kv_heads == 0, padded_vocab(tp) % (128·tp) == 0.
#pragma once
#include <cstdint>

namespace megatrain {

enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { learned, rope };
enum class ActivationKind { gelu, swiglu };

struct ModelConfig {
  int n_layers = 4;
  int d_model = 128;
  int n_heads = 4;
  int n_kv_heads = 0;  // 0 = same as n_heads
  int d_ff = 0;        // 0 = 4·d_model (gelu) or the Llama rule 2/3·4·d_model rounded up to 64 (swiglu)
  int vocab_size = 256;
  int max_seq_len = 256;
  NormKind norm = NormKind::layernorm;
  PositionKind position = PositionKind::learned;
  ActivationKind activation = ActivationKind::gelu;
  bool bias = true;
  bool tie_embeddings = true;
  float dropout = 0.0f;
  float init_std = 0.02f;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;

  int kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int head_dim() const { return d_model / n_heads; }
  int ffn_dim() const {
    if (d_ff > 0) return d_ff;
    if (activation == ActivationKind::gelu) return 4 * d_model;
    int f = 2 * (4 * d_model) / 3;
    return (f + 63) / 64 * 64;
  }
  // Vocabulary rounded up to a multiple of 128·tp (Megatron's rule: every tensor-parallel rank holds
  // an equal, 128-aligned share); the extra rows are zero and their logits excluded from the loss.
  int padded_vocab(int tp) const { return (vocab_size + 128 * tp - 1) / (128 * tp) * (128 * tp); }
};

}  // namespace megatrain
