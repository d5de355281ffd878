// Which [model] and [moe] settings a checkpoint fixes and which a resumed or fine-tuning run may
// change. Invariant: a checkpoint loads only into a model whose tensors have the stored shapes and
// meaning:
//   must match   n_layers, d_model, n_heads, n_kv_heads and d_ff (as resolved, so 0 and the
//                default they stand for are equal), vocab_size, norm, position, activation, bias,
//                qkv_bias, tie_embeddings, and max_seq_len when position = "learned" (the table's rows);
//                with experts: moe.n_experts, top_k, layers (as the set of MoE blocks, so an
//                integer and the list it stands for are equal), d_ff_expert (as resolved), router,
//                n_shared_experts, residual;
//   may change   dropout, init_std, moe.aux_loss_coef, z_loss_coef and aux_free_bias (training-only:
//                the loaded weights are not re-drawn, the losses and bias updates only steer training);
//                norm_eps, rope_theta and the rope_scaling keys (rope_*), max_seq_len when position =
//                "rope", moe.capacity_factor and drop_policy (warned: the loaded weights then compute
//                another function, as in context extension, or drop other tokens).
// A checkpoint without [moe] (written before it existed) is a dense model; so is n_experts = 0 on
// both sides, whatever the rest of [moe] says.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace megatrain {

struct ModelChanges {
  std::vector<std::string> refused;  // "model.d_model: checkpoint has 'd_model = 64', config has 'd_model = 32'"
  std::vector<std::string> warned;   // allowed, but the function computed changes
  std::vector<std::string> noted;    // allowed, training-only
};

// SAVED_TOML is the checkpoint's stored config (config_to_toml text); only its [model] and [moe] are read.
ModelChanges model_changes(const std::string& saved_toml, const Config& current);

}  // namespace megatrain
