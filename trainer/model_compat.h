// Which [model] settings a checkpoint fixes and which a resumed or fine-tuning run may change.
// Invariant: a checkpoint loads only into a model whose tensors have the stored shapes and meaning:
//   must match   n_layers, d_model, n_heads, n_kv_heads and d_ff (as resolved, so 0 and the
//                default they stand for are equal), vocab_size, norm, position, activation, bias,
//                tie_embeddings, and max_seq_len when position = "learned" (the table's rows);
//   may change   dropout and init_std (training-only settings: the loaded weights are not re-drawn);
//                norm_eps, rope_theta, and max_seq_len when position = "rope" (warned: the loaded
//                weights then compute another function, as in context extension).
#pragma once
#include <string>
#include <vector>

#include "trainer/config.h"

namespace megatrain {

struct ModelChanges {
  std::vector<std::string> refused;  // "model.d_model: checkpoint has 'd_model = 64', config has 'd_model = 32'"
  std::vector<std::string> warned;   // allowed, but the function computed changes
  std::vector<std::string> noted;    // allowed, training-only
};

// SAVED_TOML is the checkpoint's stored config (config_to_toml text); only its [model] is read.
ModelChanges model_changes(const std::string& saved_toml, const Config& current);

}  // namespace megatrain
