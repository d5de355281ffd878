#include "model/moe_stats.h"

#include <algorithm>

namespace megatrain {

MoeStats::MoeStats(const ModelConfig& cfg, StageRange range) : top_k_(cfg.moe.top_k) {
  for (int l = 0; l < range.layers; ++l) {
    const int layer = range.first_layer + l;
    if (!cfg.moe.is_moe_layer(layer)) {
      entry_.push_back(-1);
      continue;
    }
    entry_.push_back(static_cast<int>(layers_.size()));
    const std::vector<int64_t> zeros(static_cast<size_t>(cfg.moe.n_experts));
    layers_.push_back({layer, zeros, zeros});
  }
}

void MoeStats::add(int l, const MoeForwardStats& f, int64_t tokens) {
  MoeLayerStats& m = layers_[static_cast<size_t>(entry_[static_cast<size_t>(l)])];
  for (size_t e = 0; e < m.tokens.size(); ++e) {
    m.tokens[e] += f.tokens[e];
    m.step_tokens[e] += f.tokens[e];
  }
  m.dropped += f.router.dropped;
  m.assignments += tokens * top_k_;
  m.aux += f.router.aux;
  m.z += f.router.z;
  ++m.micro_batches;
}

void MoeStats::reset() {
  for (MoeLayerStats& m : layers_) m = {m.layer, std::vector<int64_t>(m.tokens.size()), m.step_tokens};
  dispatch_ms_ = 0.0;
}

void MoeStats::reset_step_tokens() {
  for (MoeLayerStats& m : layers_) std::fill(m.step_tokens.begin(), m.step_tokens.end(), 0);
}

}  // namespace megatrain
