// The attention sublayer of a pre-norm block, tensor-parallel (Megatron-LM's layout):
//   x_mid = x + Dropout(Proj(Attention(RoPE(QKV(Norm(x))))))
// QKV is column-parallel (this rank's heads: [Q_r | K_r | V_r]), the output projection
// row-parallel. Written as two halves around the attention core, so the KV-cached decoder
// (model/kv_cache.h) runs the same projections around its cached attention.
#pragma once
#include "model/attention_core.h"
#include "model/sublayer.h"

namespace megatrain {

struct AttentionWeights {
  NormWeights norm;
  Tensor qkv_w, qkv_b, proj_w, proj_b;  // biases empty when bias = false
};

// norm.out, qkv and att in the activations' dtype `act` (f32 | bf16, model/stage.h), lse f32.
struct AttentionActivations {
  NormActivations norm;  // (Nl, C); with SP entered into the tp region in BlockScratch::gathered
  Tensor qkv;            // (B, T, (Hl + 2·Hkvl)·D), after RoPE
  Tensor att;            // (N, Hl·D)
  Tensor lse;            // (B, Hl, T)
};
// With core = false, att and lse are left empty for the caller to point at shared buffers (the
// attention core recomputed in backward: Stage's selective recompute).
AttentionActivations attention_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B,
                                           int T, bool core = true, DType act = DType::f32);
WeightGradInputs attention_weight_grad_inputs(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B,
                                              int T, DType act = DType::f32);

// Norm, QKV projection and RoPE at the rows' positions: fills a.norm and a.qkv.
void attention_in(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, AttentionActivations& a,
                  BlockScratch& sc, Tensor inp, const AttentionWeights& w, const RowPositions& positions);
// Output projection of the attention result `att`, dropout, residual: x_mid = inp + ….
void attention_out(const Stream& s, const TensorParallel& tp, Tensor x_mid, BlockScratch& sc, Tensor att, Tensor inp,
                   const AttentionWeights& w, const DropoutSite& drop);

// `core`: the stage's attention core (model/attention_parts.h) — the rows' positions and a.att,
// a.lse from a.qkv.
void attention_sublayer_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor x_mid,
                                AttentionActivations& a, BlockScratch& sc, Tensor inp, const AttentionWeights& w,
                                AttentionCore& core, const DropoutSite& drop);
// dinp = gradient at inp, from dmid (the gradient at x_mid, residual included); `+=` into grad —
// but for the two projections' weights and biases when `defer` is given: their output gradients
// are kept there for attention_weight_backward().
void attention_sublayer_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                                 const AttentionWeights& grad, Tensor dmid, const AttentionActivations& a,
                                 BlockScratch& sc, Tensor inp, const AttentionWeights& w, AttentionCore& core,
                                 const DropoutSite& drop, const WeightGradInputs& defer = {});
// The deferred half: `+=` the projections' weight and bias gradients from what `defer` kept.
void attention_weight_backward(const Stream& s, const TensorParallel& tp, const AttentionWeights& grad,
                               const AttentionActivations& a, BlockScratch& sc, const WeightGradInputs& defer);

}  // namespace megatrain
