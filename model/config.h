// ModelConfig: the architecture of a decoder-only transformer (GPT-2 and Llama families), and its
// rules. Parsed by trainer/config.cpp or interop/hf_config.cpp; both check it with
// validate_model_config. Invariant after validation: d_model % n_heads == 0,
// n_heads % n_kv_heads == 0, an even head dimension with RoPE, padded_vocab(tp) % (128·tp) == 0.
#pragma once
#include <cstdint>
#include <string>

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

// Single-field rules of [model]: InputError "SOURCE: model.KEY = VALUE must be …".
void validate_model_fields(const ModelConfig& m, const std::string& source);
// Those and the cross-field rules of the architecture, each message naming SOURCE, the keys and the fix.
void validate_model_config(const ModelConfig& m, const std::string& source);

}  // namespace megatrain
