// One pre-norm transformer block as a forward/backward pair, tensor-parallel (Megatron-LM's layout):
//   x_mid = x + Dropout(Attn(Norm₁(x)));   y = x_mid + Dropout(MLP(Norm₂(x_mid)))
// — the attention sublayer (model/attention.h), then the MLP sublayer (model/mlp.h). Norms, dropout
// and residuals run on the rows outside the tp regions: all N, or N/tp with sequence parallelism.
// Forward saves exactly what backward needs (BlockActivations); backward `+=` into the parameter
// gradients and `=` into dinp.
#pragma once
#include "model/attention.h"
#include "model/mlp.h"
#include "model/params.h"

namespace megatrain {

struct BlockWeights {
  AttentionWeights attn;
  MlpWeights mlp;
};

// Where block l's tensors are in a ParamLayout (looked up once; kAbsent for a missing bias).
struct BlockParamIndex {
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  size_t attn_norm_w, attn_norm_b, qkv_w, qkv_b, proj_w, proj_b, mlp_norm_w, mlp_norm_b, fc_w, fc_b, fc2_w, fc2_b;
};
BlockParamIndex block_param_index(const ParamLayout& layout, int layer);
// Views of a block's tensors in a buffer holding the flat range from `data_begin` on
// (data[j] = flat element data_begin + j of the layout). Allocates nothing.
BlockWeights block_weights(const ParamLayout& layout, const BlockParamIndex& index, float* data, int64_t data_begin);

struct BlockActivations {
  AttentionActivations attn;
  Tensor x_mid;  // (Nl, C)
  MlpActivations mlp;
};
// Sizes: micro-batch B × T = N rows, this rank's share of heads and MLP units (local_dims). With
// `shared_core`, the attention core's output and log-sum-exp are that block's, not allocated.
BlockActivations block_activations(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B, int T,
                                   const AttentionActivations* shared_core = nullptr);
BlockScratch block_scratch(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B, int T);

// What a split backward keeps of one block for its deferred weight-gradient step (model/linear.h).
struct BlockWeightGradInputs {
  WeightGradInputs attn, mlp;
};
BlockWeightGradInputs block_weight_grad_inputs(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B,
                                               int T);

void block_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor out,
                   BlockActivations& a, BlockScratch& sc, Tensor inp, const BlockWeights& w, const DropoutSite& drop);
// With `defer`, the four projections' weight and bias gradients are left to block_weight_backward().
void block_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                    const BlockWeights& grad, Tensor dout, const BlockActivations& a, BlockScratch& sc, Tensor inp,
                    const BlockWeights& w, const DropoutSite& drop, const BlockWeightGradInputs& defer = {});
void block_weight_backward(const Stream& s, const TensorParallel& tp, const BlockWeights& grad,
                           const BlockActivations& a, BlockScratch& sc, const BlockWeightGradInputs& defer);

}  // namespace megatrain
