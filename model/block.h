// One pre-norm transformer block as a forward/backward pair, tensor-parallel (Megatron-LM's layout):
//   x_mid = x + Dropout(Attn(Norm₁(x)));   y = x_mid + Dropout(MLP(Norm₂(x_mid)))
// — the attention sublayer (model/attention.h), then the MLP sublayer (model/mlp.h). Norms, dropout
// and residuals run on the rows outside the tp regions: all N, or N/tp with sequence parallelism.
// Forward saves exactly what backward needs (BlockActivations); backward `+=` into the parameter
// gradients and `=` into dinp.
#pragma once
#include "model/attention.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "model/params.h"

namespace megatrain {

// A dense block has the MLP sublayer, an MoE block (cfg.moe.is_moe_layer) the MoE sublayer
// (model/moe.h) in its place; `moe` says which.
struct BlockWeights {
  AttentionWeights attn;
  MlpWeights mlp;
  MoeWeights experts;  // norm and router bound with the block's dense tensors, fc and proj from its expert unit
  bool moe = false;
};

// Where block l's tensors are in a ParamLayout (looked up once; kAbsent for a missing tensor).
struct BlockParamIndex {
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  size_t attn_norm_w, attn_norm_b, qkv_w, qkv_b, proj_w, proj_b, mlp_norm_w, mlp_norm_b, fc_w, fc_b, fc2_w, fc2_b;
  // MoE blocks
  size_t router = kAbsent, router_bias = kAbsent, expert_fc = kAbsent, expert_proj = kAbsent;
  size_t shared_fc = kAbsent, shared_proj = kAbsent, coef = kAbsent;
};
BlockParamIndex block_param_index(const ParamLayout& layout, int layer);
// Views of a block's dense tensors in a buffer holding the flat range from `data_begin` on
// (data[j] = flat element data_begin + j of the layout). Allocates nothing.
BlockWeights block_weights(const ParamLayout& layout, const BlockParamIndex& index, float* data, int64_t data_begin,
                           Device device = Device::cpu);
// Views of an MoE block's expert tensors (its expert unit: model/params.h) in such a buffer, into w.
void bind_expert_weights(BlockWeights& w, const ParamLayout& layout, const BlockParamIndex& index, float* data,
                         int64_t data_begin, Device device = Device::cpu);

struct BlockActivations {
  AttentionActivations attn;
  Tensor x_mid;  // (Nl, C)
  MlpActivations mlp;
  MoeActivations moe;
};
// Which second sublayers' activations (or scratch) to plan: the MLP's, the MoE's with its expert
// parallelism, or both (buffers shared by the recomputed blocks of a stage that has both kinds).
struct BlockKinds {
  bool mlp = true, moe = false;
  int ep = 1;
};
// Sizes: micro-batch B × T = N rows, this rank's share of heads and MLP units (local_dims). With
// `shared_core`, the attention core's output and log-sum-exp are that block's, not allocated. `act`:
// the dtype of the attention and MLP sublayers' GEMM-facing activations (Stage::activation_dtype);
// x_mid, the residual stream, and the MoE sublayer's activations are f32.
BlockActivations block_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B, int T,
                                   const AttentionActivations* shared_core = nullptr, BlockKinds kinds = {},
                                   DType act = DType::f32);
// dqkv and dfc in `act` (the gradients the GEMMs read), the others f32.
BlockScratch block_scratch(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B, int T,
                           DType act = DType::f32);

// What a split backward keeps of one block for its deferred weight-gradient step (model/linear.h).
struct BlockWeightGradInputs {
  WeightGradInputs attn, mlp;
};
BlockWeightGradInputs block_weight_grad_inputs(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B,
                                               int T, DType act = DType::f32);

// `core`: the stage's attention core (model/attention_parts.h); `moe`: how MoE blocks run (needed
// when w.moe).
void block_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor out,
                   BlockActivations& a, BlockScratch& sc, Tensor inp, const BlockWeights& w, AttentionCore& core,
                   const DropoutSite& drop, const MoeRuntime* moe = nullptr);
// With `defer`, the four projections' weight and bias gradients are left to block_weight_backward()
// (an MoE sublayer's gradients are always added at once).
void block_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                    const BlockWeights& grad, Tensor dout, const BlockActivations& a, BlockScratch& sc, Tensor inp,
                    const BlockWeights& w, AttentionCore& core, const DropoutSite& drop,
                    const BlockWeightGradInputs& defer = {}, const MoeRuntime* moe = nullptr);
void block_weight_backward(const Stream& s, const TensorParallel& tp, const BlockWeights& grad,
                           const BlockActivations& a, BlockScratch& sc, const BlockWeightGradInputs& defer);

}  // namespace megatrain
