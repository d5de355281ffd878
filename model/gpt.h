// GptModel: a decoder-only transformer stage — token (+ position) embedding, a range of blocks,
// final norm, LM head and fused cross-entropy. At pp = 1 the one stage holds all of them.
// Parameters and gradients are views into two flat buffers laid out by gpt_param_layout; all
// activation memory is planned once at construction, so a step allocates nothing.
//
// [Note: grad accumulation] backward() `+=` into the gradient buffer, so calling
// forward/backward for every micro-batch and zero_grads() once per step accumulates the step's
// gradient. The loss gradient is scaled by ForwardOptions::dloss_scale (1 / tokens in the global
// batch), which makes the accumulated gradient that of the mean loss over the global batch.
#pragma once
#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "model/block.h"
#include "model/config.h"
#include "model/params.h"

namespace megatrain {

struct ForwardOptions {
  LossGrad grad = LossGrad::none;
  float dloss_scale = 0.0f;     // ∂(global loss)/∂(token loss)
  bool dropout = false;         // training mode
  uint64_t dropout_seed = 0;
  uint64_t first_sample = 0;    // global index of the micro-batch's first sample (keys dropout)
};

class GptModel {
 public:
  GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len);

  const ModelConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  int64_t num_floats() const { return layout_.total(); }

  void init(uint64_t seed) { init_params(layout_, params_.data(), cfg_, seed); }
  void zero_grads();
  // inputs, targets: (B, T) token ids. Returns the mean loss over the B·T tokens.
  float forward(const int32_t* inputs, const int32_t* targets, const ForwardOptions& opt);
  // Requires the preceding forward() to have used LossGrad::in_place.
  void backward();

  // Logits (B·T, Vp) of the last forward(); the padded columns ≥ vocab_size are not meaningful.
  // Only after a forward() with LossGrad::none (in_place overwrites them with their gradient).
  Tensor logits() const {
    MT_CHECK(last_.grad == LossGrad::none, "logits() needs a preceding forward() with LossGrad::none");
    return act_.logits;
  }
  // The weights the forward pass reads, for other inference paths (model/kv_cache.h).
  const std::vector<BlockWeights>& weights() const { return w_; }
  Tensor wte() const { return wte_; }    // (Vp, C)
  Tensor wpe() const { return wpe_; }    // (max_seq_len, C), empty with rope
  Tensor head() const { return head_; }  // (Vp, C), = wte with tied embeddings
  const NormWeights& final_norm() const { return final_w_; }

  size_t activation_bytes() const { return arena_.capacity(); }
  // Model FLOPs per trained token (forward + backward), see README "MFU".
  static double flops_per_token(const ModelConfig& cfg, int seq_len);

 private:
  struct Activations {
    Tensor tokens, targets;              // (B, T) i32
    std::vector<Tensor> residual;        // n_layers + 1 of (N, C): block inputs, then the last output
    std::vector<BlockActivations> blocks;
    NormActivations final_norm;
    Tensor logits;                       // (N, Vp), holds dlogits after a training forward
    Tensor losses;                       // (N)
  };
  struct Scratch {
    BlockScratch block;
    Tensor dres_a, dres_b;               // (N, C) residual-stream gradients, ping-pong
  };
  void plan(Arena& arena);
  DropoutSite dropout_site(int layer) const;

  ModelConfig cfg_;
  int B_, T_;
  ParamLayout layout_;
  FlatBuffer params_, grads_;
  Arena arena_;
  Activations act_;
  Scratch scratch_;
  std::vector<BlockWeights> w_, g_;
  Tensor wte_, wpe_, head_, dwte_, dwpe_, dhead_;
  NormWeights final_w_, final_g_;
  ForwardOptions last_;
  Stream stream_ = Stream::cpu();
};

}  // namespace megatrain
