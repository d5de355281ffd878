#include "model/attention.h"

#include "model/linear.h"

namespace megatrain {

AttentionActivations attention_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B, int T,
                                           bool core, DType act) {
  const LocalDims L = local_of(cfg, tp);
  const int64_t N = static_cast<int64_t>(B) * T, D = cfg.head_dim();
  AttentionActivations a;
  a.norm = norm_activations(arena, cfg, tp.local_rows(), act);
  a.qkv = arena.tensor(Shape{B, T, (L.heads + 2 * L.kv_heads) * D}, act);
  if (!core) return a;
  a.att = arena.tensor(Shape{N, L.heads * D}, act);
  a.lse = arena.tensor(Shape{B, L.heads, T});
  return a;
}

WeightGradInputs attention_weight_grad_inputs(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B, int T,
                                              DType act) {
  Arena shapes_only = Arena::measuring();
  const AttentionActivations like = attention_activations(shapes_only, cfg, tp, B, T);
  return {arena.tensor(like.qkv.shape, act), arena.tensor(Shape{int64_t{B} * T, cfg.d_model})};
}

void attention_in(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, AttentionActivations& a,
                  BlockScratch& sc, Tensor inp, const AttentionWeights& w, const RowPositions& positions) {
  const LocalDims L = local_of(cfg, tp);
  norm_forward(s, cfg, a.norm, inp, w.norm);
  column_parallel_forward(s, a.qkv, enter_region(tp, a.norm, sc.gathered), w.qkv_w, w.qkv_b);
  if (cfg.position == PositionKind::rope)
    rope_at(s, a.qkv, positions, L.heads, L.kv_heads, rope_frequencies(cfg), RopeDirection::forward);
}

void attention_out(const Stream& s, const TensorParallel& tp, Tensor x_mid, BlockScratch& sc, Tensor att, Tensor inp,
                   const AttentionWeights& w, const DropoutSite& drop) {
  row_parallel_forward(s, tp, sc.proj, sc.partial, att, w.proj_w, w.proj_b);
  apply_dropout(s, sc.proj, drop, kSiteAttn);
  add_forward(s, x_mid, inp, sc.proj);
}

void attention_sublayer_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor x_mid,
                                AttentionActivations& a, BlockScratch& sc, Tensor inp, const AttentionWeights& w,
                                AttentionCore& core, const DropoutSite& drop) {
  attention_in(s, cfg, tp, a, sc, inp, w, core.positions());
  core.forward(s, a.att, a.lse, a.qkv);
  attention_out(s, tp, x_mid, sc, a.att, inp, w, drop);
}

void attention_sublayer_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                                 const AttentionWeights& grad, Tensor dmid, const AttentionActivations& a,
                                 BlockScratch& sc, Tensor inp, const AttentionWeights& w, AttentionCore& core,
                                 const DropoutSite& drop, const WeightGradInputs& defer) {
  const LocalDims L = local_of(cfg, tp);
  const bool now = !defer.deferred();
  const Tensor dattp = through_dropout(s, dmid, sc.proj, drop, kSiteAttn);
  const Tensor dproj_full = full_rows(tp, dattp, sc.partial);
  row_parallel_backward(s, tp, sc.datt, now ? grad.proj_w : Tensor{}, grad.proj_b, dproj_full, dattp, a.att, w.proj_w);
  if (!now) copy(s, defer.d_out_proj, dproj_full);
  core.backward(s, sc.dqkv, sc.datt, a.qkv, a.att, a.lse);
  if (cfg.position == PositionKind::rope)
    rope_at(s, sc.dqkv, core.positions(), L.heads, L.kv_heads, rope_frequencies(cfg), RopeDirection::backward);
  column_parallel_backward(s, tp, sc.dnorm, full_rows(tp, sc.dnorm, sc.dfull), now ? grad.qkv_w : Tensor{}, grad.qkv_b,
                           sc.dqkv, enter_region(tp, a.norm, sc.gathered), w.qkv_w);
  if (!now) copy(s, defer.d_in_proj, sc.dqkv);
  norm_backward(s, cfg, dinp, grad.norm, sc.dnorm, dmid, a.norm, inp, w.norm);
}

void attention_weight_backward(const Stream& s, const TensorParallel& tp, const AttentionWeights& grad,
                               const AttentionActivations& a, BlockScratch& sc, const WeightGradInputs& defer) {
  linear_weight_backward(s, grad.proj_w, grad.proj_b, defer.d_out_proj, a.att);
  linear_weight_backward(s, grad.qkv_w, grad.qkv_b, defer.d_in_proj, enter_region(tp, a.norm, sc.gathered));
}

}  // namespace megatrain
