#include "model/attention.h"

#include "model/linear.h"

namespace megatrain {

AttentionActivations attention_activations(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B,
                                           int T) {
  const LocalDims L = local_of(cfg, tp);
  const int64_t N = static_cast<int64_t>(B) * T, D = cfg.head_dim();
  AttentionActivations a;
  a.norm = norm_activations(arena, cfg, tp.local_rows());
  a.qkv = arena.tensor(Shape{B, T, (L.heads + 2 * L.kv_heads) * D});
  a.att = arena.tensor(Shape{N, L.heads * D});
  a.lse = arena.tensor(Shape{B, L.heads, T});
  return a;
}

void attention_in(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, AttentionActivations& a,
                  BlockScratch& sc, Tensor inp, const AttentionWeights& w, int first_position) {
  const LocalDims L = local_of(cfg, tp);
  norm_forward(s, cfg, a.norm, inp, w.norm);
  column_parallel_forward(s, a.qkv, enter_region(tp, a.norm, sc.gathered), w.qkv_w, w.qkv_b);
  if (cfg.position == PositionKind::rope)
    rope_apply(s, a.qkv, L.heads, L.kv_heads, cfg.rope_theta, RopeDirection::forward, first_position);
}

void attention_out(const Stream& s, const TensorParallel& tp, Tensor x_mid, BlockScratch& sc, Tensor att, Tensor inp,
                   const AttentionWeights& w, const DropoutSite& drop) {
  row_parallel_forward(s, tp, sc.proj, sc.partial, att, w.proj_w, w.proj_b);
  apply_dropout(s, sc.proj, drop, kSiteAttn);
  add_forward(s, x_mid, inp, sc.proj);
}

void attention_sublayer_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor x_mid,
                                AttentionActivations& a, BlockScratch& sc, Tensor inp, const AttentionWeights& w,
                                const DropoutSite& drop) {
  const LocalDims L = local_of(cfg, tp);
  attention_in(s, cfg, tp, a, sc, inp, w);
  attention_forward(s, a.att, a.lse, a.qkv, L.heads, L.kv_heads);
  attention_out(s, tp, x_mid, sc, a.att, inp, w, drop);
}

void attention_sublayer_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                                 const AttentionWeights& grad, Tensor dmid, const AttentionActivations& a,
                                 BlockScratch& sc, Tensor inp, const AttentionWeights& w, const DropoutSite& drop) {
  const LocalDims L = local_of(cfg, tp);
  const Tensor dattp = through_dropout(s, dmid, sc.proj, drop, kSiteAttn);
  row_parallel_backward(s, tp, sc.datt, grad.proj_w, grad.proj_b, full_rows(tp, dattp, sc.partial), dattp, a.att,
                        w.proj_w);
  attention_backward(s, sc.dqkv, sc.datt, a.qkv, a.att, a.lse, L.heads, L.kv_heads);
  if (cfg.position == PositionKind::rope)
    rope_apply(s, sc.dqkv, L.heads, L.kv_heads, cfg.rope_theta, RopeDirection::backward);
  column_parallel_backward(s, tp, sc.dnorm, full_rows(tp, sc.dnorm, sc.dfull), grad.qkv_w, grad.qkv_b, sc.dqkv,
                           enter_region(tp, a.norm, sc.gathered), w.qkv_w);
  norm_backward(s, cfg, dinp, grad.norm, sc.dnorm, dmid, a.norm, inp, w.norm);
}

}  // namespace megatrain
