// ModelConfig: the architecture of a decoder-only transformer (GPT-2 and Llama families), and its
// rules. Parsed by config/config.cpp or interop/hf_config.cpp; both check it with
// validate_model_config. Invariant after validation: d_model % n_heads == 0,
// n_heads % n_kv_heads == 0, an even head dimension with RoPE, padded_vocab(tp) % (128·tp) == 0,
// and with experts 1 ≤ top_k ≤ n_experts and moe.layers strictly increasing inside [0, n_layers).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/rope_frequencies.h"

namespace megatrain {

enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { learned, rope };
enum class ActivationKind { gelu, swiglu };
enum class RouterKind { softmax, sigmoid };
enum class DropPolicy { probs, position };

// [moe]: Mixture-of-Experts blocks (model/moe.h). In an MoE block the MLP is replaced by n_experts
// expert MLPs (the model's activation, no biases) of which a router picks top_k per token; the
// attention and both norms stay. n_experts = 0: a dense model.
struct MoeConfig {
  int n_experts = 0;
  int top_k = 2;
  int every = 1;                 // blocks l with l % every == 0 are MoE (Megatron's moe_layer_freq) ...
  std::vector<int> layers = {};  // ... unless this list names them
  int d_ff_expert = 0;           // 0 = model.ffn_dim()
  RouterKind router = RouterKind::softmax;
  float aux_loss_coef = 0.0f;    // Switch/GShard load-balancing loss
  float z_loss_coef = 0.0f;      // ST-MoE router z-loss
  float aux_free_bias = 0.0f;    // DeepSeek-V3 bias update rate (0 = off)
  float capacity_factor = 0.0f;  // 0 = dropless
  DropPolicy drop_policy = DropPolicy::probs;
  int n_shared_experts = 0;  // always-on experts (one dense MLP of n_shared·d_ff_expert units)
  bool residual = false;     // DeepSpeed PR-MoE: a dense MLP beside the experts, mixed by a learned coefficient

  bool enabled() const { return n_experts > 0; }
  // The units of the dense branch beside the experts (model/moe_dense_branch.h; 0: no branch): the
  // residual MoE's MLP as wide as one expert, or the shared experts side by side.
  int dense_branch_units(int expert_units) const { return residual ? expert_units : n_shared_experts * expert_units; }
  bool is_moe_layer(int layer) const {
    if (!enabled()) return false;
    if (!layers.empty()) {
      for (int l : layers)
        if (l == layer) return true;
      return false;
    }
    return layer % every == 0;
  }
};

// model.rope_scaling and its parameters (Hugging Face's rope_scaling, for a context extended after
// pretraining; kernels/rope_frequencies.h has the formulas). Needs position = "rope".
struct RopeScalingConfig {
  RopeScaling kind = RopeScaling::none;
  float factor = 1.0f;            // linear, llama3, yarn: how many times the context grew (≥ 1)
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3: > low_freq_factor
  int original_max_len = 0;       // llama3: the pretraining context (required); yarn: 0 = max_seq_len
  float beta_fast = 32.0f;        // yarn: the ramp's bounds, in rotations over the original context
  float beta_slow = 1.0f;
  float attention_factor = 0.0f;  // yarn: 0 = 0.1·ln(factor) + 1
};

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
  bool qkv_bias = false;  // a bias on the q/k/v projection even when bias = false (Qwen2)
  bool tie_embeddings = true;
  float dropout = 0.0f;
  float init_std = 0.02f;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScalingConfig rope_scaling;
  MoeConfig moe;

  int kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int head_dim() const { return d_model / n_heads; }
  int ffn_dim() const {
    if (d_ff > 0) return d_ff;
    if (activation == ActivationKind::gelu) return 4 * d_model;
    int f = 2 * (4 * d_model) / 3;
    return (f + 63) / 64 * 64;
  }
  int expert_ffn_dim() const { return moe.d_ff_expert > 0 ? moe.d_ff_expert : ffn_dim(); }
  // Vocabulary rounded up to a multiple of 128·tp (Megatron's rule: every tensor-parallel rank holds
  // an equal, 128-aligned share); the extra rows are zero and their logits excluded from the loss.
  int padded_vocab(int tp) const { return (vocab_size + 128 * tp - 1) / (128 * tp) * (128 * tp); }
};

// The frequencies RoPE turns this model's heads by: rope_theta and rope_scaling resolved (YaRN's ramp
// bounds and attention factor as transformers computes them).
RopeFrequencies rope_frequencies(const ModelConfig& m);

// Single-field rules of [model]: InputError "SOURCE: model.KEY = VALUE must be …".
void validate_model_fields(const ModelConfig& m, const std::string& source);
// Those and the cross-field rules of the architecture, each message naming SOURCE, the keys and the fix.
void validate_model_config(const ModelConfig& m, const std::string& source);

}  // namespace megatrain
