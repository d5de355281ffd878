// GptModel: a decoder-only transformer stage — token (+ position) embedding, a range of blocks,
// final norm, LM head and cross-entropy. At pp = 1 the one stage holds all of them. Tensor-parallel
// (model/block.h, model/loss.h): this rank holds its heads, MLP units and vocabulary rows, the
// embedding is vocabulary-parallel and the loss is computed without gathering the logits.
// Parameters and gradients are views into flat buffers laid out by gpt_param_layout: either the
// model's own full buffers, or, per unit (gpt_param_units), whatever a UnitState provides while
// the unit is in use (ZeRO gathers and reduces them across data-parallel ranks). All activation
// memory is planned once at construction, so a step allocates nothing.
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
#include "parallel/mappings.h"

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
  // Owns full parameter and gradient buffers.
  GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len);
  // Uses `state` (which must outlive the model) for every unit's parameters and gradients; the
  // model holds no parameter or gradient memory of its own, and params(), grads(), init(),
  // zero_grads() and the weight accessors below are not available.
  GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len, UnitState& state);
  // The same, as rank tp.rank() of the tensor-parallel group `tp` (layout: gpt_param_layout with
  // that rank and options.sequence_parallel).
  GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len, UnitState& state, const Comm& tp,
           const TpOptions& options);

  const ModelConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  const std::vector<FlatRange>& units() const { return units_; }
  float* params() const { return owned().params_.data(); }
  float* grads() const { return owned().grads_.data(); }
  int64_t num_floats() const { return layout_.total(); }

  void init(uint64_t seed) { init_params(layout_, params(), cfg_, seed); }
  void zero_grads();
  // inputs, targets: (B, T) token ids. Returns the mean loss over the B·T tokens.
  float forward(const int32_t* inputs, const int32_t* targets, const ForwardOptions& opt);
  // Requires the preceding forward() to have used LossGrad::in_place.
  void backward();

  // Logits (B·T, Vp) of the last forward() (tp = 1); the padded columns ≥ vocab_size are not meaningful.
  // Only after a forward() with LossGrad::none (in_place overwrites them with their gradient).
  Tensor logits() const {
    MT_CHECK(last_.grad == LossGrad::none, "logits() needs a preceding forward() with LossGrad::none");
    return act_.logits;
  }
  // The weights the forward pass reads, for other inference paths (model/kv_cache.h).
  const std::vector<BlockWeights>& weights() const { return owned().w_; }
  Tensor wte() const { return owned().wte_; }    // (Vp, C)
  Tensor wpe() const { return owned().wpe_; }    // (max_seq_len, C), empty with rope
  Tensor head() const { return owned().head_; }  // (Vp, C), = wte with tied embeddings
  const NormWeights& final_norm() const { return owned().final_w_; }

  size_t activation_bytes() const { return arena_.capacity(); }
  // Model FLOPs per trained token (forward + backward), see README "MFU".
  static double flops_per_token(const ModelConfig& cfg, int seq_len);

 private:
  struct Activations {
    Tensor tokens, targets;              // (B, T) i32
    std::vector<Tensor> residual;        // n_layers + 1 of (Nl, C): block inputs, then the last output
    std::vector<BlockActivations> blocks;
    NormActivations final_norm;          // (Nl, C)
    Tensor head_in;                      // (N, C) final norm output entered into the tp region
    Tensor logits;                       // (N, Vl) this rank's vocabulary, dlogits after a training forward
    Tensor losses;                       // (N)
    Tensor row_max;                      // (N)
    Tensor sums;                         // (2, N): exp-sums, then target logits (one reduction)
  };
  struct Scratch {
    BlockScratch block;
    Tensor dres_a, dres_b;               // (Nl, C) residual-stream gradients, ping-pong
  };
  GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len, UnitState* state, TensorParallel tp);
  void plan(Arena& arena);
  DropoutSite dropout_site(int layer) const;
  const GptModel& owned() const {
    MT_CHECK(own_state_ != nullptr, "this GptModel uses an external UnitState and has no full buffers");
    return *this;
  }
  // The views a unit binds: of the parameters or of the gradients (p[j] = flat element
  // units_[unit].begin + j).
  struct UnitViews {
    std::vector<BlockWeights>& blocks;
    Tensor &wte, &wpe, &head;
    NormWeights& final_norm;
  };
  void bind_unit(int unit, float* p, UnitViews v) const;
  void acquire_params(int unit) { bind_unit(unit, state_->unit_params(unit), {w_, wte_, wpe_, head_, final_w_}); }
  void acquire_grads(int unit) { bind_unit(unit, state_->unit_grads(unit), {g_, dwte_, dwpe_, dhead_, final_g_}); }

  ModelConfig cfg_;
  int B_, T_;
  TensorParallel tp_;
  LocalDims local_;
  ParamLayout layout_;
  std::vector<BlockParamIndex> block_index_;
  size_t wte_index_ = 0, wpe_index_ = BlockParamIndex::kAbsent, head_index_ = 0;
  size_t final_w_index_ = 0, final_b_index_ = BlockParamIndex::kAbsent;
  std::vector<FlatRange> units_;
  std::vector<int> forward_order_, backward_order_;  // the unit_params order of each pass
  FlatBuffer params_, grads_;                        // empty with an external state
  std::unique_ptr<FullState> own_state_;
  UnitState* state_ = nullptr;
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
