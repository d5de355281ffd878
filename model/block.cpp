#include "model/block.h"

namespace megatrain {

BlockParamIndex block_param_index(const ParamLayout& layout, int layer) {
  const std::string L = "layers." + std::to_string(layer);
  auto get = [&](const char* n) { return layout.index_of(L + n); };
  auto maybe = [&](const char* n) { return layout.contains(L + n) ? get(n) : BlockParamIndex::kAbsent; };
  return {get(".attn_norm.weight"), maybe(".attn_norm.bias"), get(".attn.qkv.weight"), maybe(".attn.qkv.bias"),
          get(".attn.proj.weight"), maybe(".attn.proj.bias"), get(".mlp_norm.weight"),  maybe(".mlp_norm.bias"),
          get(".mlp.fc.weight"),    maybe(".mlp.fc.bias"),    get(".mlp.proj.weight"),  maybe(".mlp.proj.bias")};
}

BlockWeights block_weights(const ParamLayout& layout, const BlockParamIndex& x, float* data, int64_t data_begin) {
  auto v = [&](size_t i) { return i == BlockParamIndex::kAbsent ? Tensor{} : layout.view_in(data, data_begin, i); };
  BlockWeights w;
  w.attn = {{v(x.attn_norm_w), v(x.attn_norm_b)}, v(x.qkv_w), v(x.qkv_b), v(x.proj_w), v(x.proj_b)};
  w.mlp = {{v(x.mlp_norm_w), v(x.mlp_norm_b)}, v(x.fc_w), v(x.fc_b), v(x.fc2_w), v(x.fc2_b)};
  return w;
}

BlockActivations block_activations(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B, int T,
                                   const AttentionActivations* shared_core) {
  BlockActivations a;
  a.attn = attention_activations(arena, cfg, tp, B, T, shared_core == nullptr);
  if (shared_core != nullptr) {
    a.attn.att = shared_core->att;
    a.attn.lse = shared_core->lse;
  }
  a.x_mid = arena.tensor(Shape{tp.local_rows(), cfg.d_model});
  a.mlp = mlp_activations(arena, cfg, tp, static_cast<int64_t>(B) * T);
  return a;
}

BlockScratch block_scratch(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B, int T) {
  Arena shapes_only = Arena::measuring();
  const BlockActivations like = block_activations(shapes_only, cfg, tp, B, T);
  const Shape full{static_cast<int64_t>(B) * T, cfg.d_model};
  BlockScratch sc;
  sc.proj = arena.tensor(like.x_mid.shape);
  sc.partial = tp.sequence_parallel() ? arena.tensor(full) : sc.proj;
  sc.dfull = tp.sequence_parallel() ? arena.tensor(full) : Tensor{};
  sc.gathered = tp.sequence_parallel() ? arena.tensor(full) : Tensor{};
  sc.dnorm = arena.tensor(like.x_mid.shape);
  sc.dmid = arena.tensor(like.x_mid.shape);
  sc.datt = arena.tensor(like.attn.att.shape);
  sc.dqkv = arena.tensor(like.attn.qkv.shape);
  sc.dfc = arena.tensor(like.mlp.fc.shape);
  sc.dact = arena.tensor(like.mlp.act.shape);
  return sc;
}

BlockWeightGradInputs block_weight_grad_inputs(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B,
                                               int T) {
  return {attention_weight_grad_inputs(arena, cfg, tp, B, T), mlp_weight_grad_inputs(arena, cfg, tp, int64_t{B} * T)};
}

void block_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor out,
                   BlockActivations& a, BlockScratch& sc, Tensor inp, const BlockWeights& w, const DropoutSite& drop) {
  attention_sublayer_forward(s, cfg, tp, a.x_mid, a.attn, sc, inp, w.attn, drop);
  mlp_sublayer_forward(s, cfg, tp, out, a.mlp, sc, a.x_mid, w.mlp, drop);
}

void block_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                    const BlockWeights& grad, Tensor dout, const BlockActivations& a, BlockScratch& sc, Tensor inp,
                    const BlockWeights& w, const DropoutSite& drop, const BlockWeightGradInputs& defer) {
  mlp_sublayer_backward(s, cfg, tp, sc.dmid, grad.mlp, dout, a.mlp, sc, a.x_mid, w.mlp, drop, defer.mlp);
  attention_sublayer_backward(s, cfg, tp, dinp, grad.attn, sc.dmid, a.attn, sc, inp, w.attn, drop, defer.attn);
}

void block_weight_backward(const Stream& s, const TensorParallel& tp, const BlockWeights& grad,
                           const BlockActivations& a, BlockScratch& sc, const BlockWeightGradInputs& defer) {
  mlp_weight_backward(s, tp, grad.mlp, a.mlp, sc, defer.mlp);
  attention_weight_backward(s, tp, grad.attn, a.attn, sc, defer.attn);
}

}  // namespace megatrain
