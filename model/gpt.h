// GptModel: the whole model in one process (tp = pp = dp = 1) with parameter and gradient buffers
// of its own — for the tools (generate), the tests and the benchmarks. It is a Stage holding every
// block (model/stage.h) over a FullState of its buffers, with one micro-batch slot; training runs a
// Stage directly on the trainer's UnitState instead. The weight views for other inference paths
// (model/kv_cache.h) are made once, since the buffers never move.
#pragma once
#include <vector>

#include "kernels/flat_buffer.h"
#include "model/stage.h"

namespace megatrain {

class GptModel {
 public:
  GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len);

  const ModelConfig& config() const { return stage_.config(); }
  const ParamLayout& layout() const { return layout_; }
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  size_t activation_bytes() const { return stage_.activation_bytes(); }
  Stage& stage() { return stage_; }

  void init(uint64_t seed) { init_params(layout_, params(), config(), seed); }
  void zero_grads();
  // inputs, targets: (B, T) token ids. Returns the mean loss over the B·T tokens.
  float forward(const int32_t* inputs, const int32_t* targets, const ForwardOptions& opt) {
    return stage_.forward(0, MicroBatch{inputs, targets, opt});
  }
  // Requires the preceding forward() to have used LossGrad::in_place; `+=` into grads().
  void backward() { stage_.backward(0); }
  // Logits (B·T, Vp) of the last forward() with LossGrad::none; padded columns are not meaningful.
  Tensor logits() const { return stage_.logits(0); }

  // The weights the forward pass reads.
  const std::vector<BlockWeights>& blocks() const { return blocks_; }
  Tensor wte() const { return wte_; }    // (Vp, C)
  Tensor wpe() const { return wpe_; }    // (max_seq_len, C), empty with rope
  Tensor head() const { return head_; }  // (Vp, C), = wte with tied embeddings
  const NormWeights& final_norm() const { return final_norm_; }

 private:
  ParamLayout layout_;
  FlatBuffer params_, grads_;
  FullState state_, experts_;  // the dense units and the MoE blocks' expert units, both over the buffers
  Stage stage_;
  std::vector<BlockWeights> blocks_;
  Tensor wte_, wpe_, head_;
  NormWeights final_norm_;
};

}  // namespace megatrain
