#include "model/block.h"

namespace megatrain {

BlockParamIndex block_param_index(const ParamLayout& layout, int layer) {
  const std::string L = "layers." + std::to_string(layer);
  auto maybe = [&](const char* n) { return layout.contains(L + n) ? layout.index_of(L + n) : BlockParamIndex::kAbsent; };
  BlockParamIndex x{maybe(".attn_norm.weight"), maybe(".attn_norm.bias"), maybe(".attn.qkv.weight"),
                    maybe(".attn.qkv.bias"),    maybe(".attn.proj.weight"), maybe(".attn.proj.bias"),
                    maybe(".mlp_norm.weight"),  maybe(".mlp_norm.bias"),    maybe(".mlp.fc.weight"),
                    maybe(".mlp.fc.bias"),      maybe(".mlp.proj.weight"),  maybe(".mlp.proj.bias")};
  x.router = maybe(".moe.router.weight");
  x.router_bias = maybe(".moe.router.bias");
  x.shared_fc = maybe(".moe.shared.fc.weight");
  x.shared_proj = maybe(".moe.shared.proj.weight");
  x.coef = maybe(".moe.coef.weight");
  x.expert_fc = maybe(".moe.experts.fc.weight");
  x.expert_proj = maybe(".moe.experts.proj.weight");
  const bool moe = x.router != BlockParamIndex::kAbsent;
  MT_CHECK(x.attn_norm_w != BlockParamIndex::kAbsent && x.qkv_w != BlockParamIndex::kAbsent &&
               x.mlp_norm_w != BlockParamIndex::kAbsent &&
               (moe ? x.expert_fc != BlockParamIndex::kAbsent && x.expert_proj != BlockParamIndex::kAbsent
                    : x.fc_w != BlockParamIndex::kAbsent && x.fc2_w != BlockParamIndex::kAbsent),
           "the layout misses tensors of block {}", layer);
  return x;
}

BlockWeights block_weights(const ParamLayout& layout, const BlockParamIndex& x, float* data, int64_t data_begin,
                           Device device) {
  auto v = [&](size_t i) {
    return i == BlockParamIndex::kAbsent ? Tensor{} : layout.view_in(data, data_begin, i, device);
  };
  BlockWeights w;
  w.attn = {{v(x.attn_norm_w), v(x.attn_norm_b)}, v(x.qkv_w), v(x.qkv_b), v(x.proj_w), v(x.proj_b)};
  w.moe = x.router != BlockParamIndex::kAbsent;
  if (w.moe) {
    w.experts.norm = {v(x.mlp_norm_w), v(x.mlp_norm_b)};
    w.experts.router = v(x.router);
    w.experts.router_bias = v(x.router_bias);
    w.experts.dense = {v(x.shared_fc), v(x.shared_proj), v(x.coef)};
  } else {
    w.mlp = {{v(x.mlp_norm_w), v(x.mlp_norm_b)}, v(x.fc_w), v(x.fc_b), v(x.fc2_w), v(x.fc2_b)};
  }
  return w;
}

void bind_expert_weights(BlockWeights& w, const ParamLayout& layout, const BlockParamIndex& x, float* data,
                         int64_t data_begin, Device device) {
  w.experts.fc = layout.view_in(data, data_begin, x.expert_fc, device);
  w.experts.proj = layout.view_in(data, data_begin, x.expert_proj, device);
}

BlockActivations block_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B, int T,
                                   const AttentionActivations* shared_core, BlockKinds kinds, DType act) {
  BlockActivations a;
  a.attn = attention_activations(arena, cfg, tp, B, T, shared_core == nullptr, act);
  if (shared_core != nullptr) {
    a.attn.att = shared_core->att;
    a.attn.lse = shared_core->lse;
  }
  a.x_mid = arena.tensor(Shape{tp.local_rows(), cfg.d_model});
  if (kinds.mlp) a.mlp = mlp_activations(arena, cfg, tp, static_cast<int64_t>(B) * T, act);
  if (kinds.moe) a.moe = moe_activations(arena, cfg, tp, kinds.ep, static_cast<int64_t>(B) * T);
  return a;
}

BlockScratch block_scratch(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B, int T, DType act) {
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
  sc.dqkv = arena.tensor(like.attn.qkv.shape, act);
  sc.dfc = arena.tensor(like.mlp.fc.shape, act);
  sc.dact = arena.tensor(like.mlp.act.shape);
  return sc;
}

BlockWeightGradInputs block_weight_grad_inputs(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int B,
                                               int T, DType act) {
  return {attention_weight_grad_inputs(arena, cfg, tp, B, T, act),
          mlp_weight_grad_inputs(arena, cfg, tp, int64_t{B} * T, act)};
}

void block_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor out,
                   BlockActivations& a, BlockScratch& sc, Tensor inp, const BlockWeights& w, AttentionCore& core,
                   const DropoutSite& drop, const MoeRuntime* moe) {
  attention_sublayer_forward(s, cfg, tp, a.x_mid, a.attn, sc, inp, w.attn, core, drop);
  if (w.moe)
    moe_sublayer_forward(s, cfg, tp, *moe, out, a.moe, sc, a.x_mid, w.experts, drop);
  else
    mlp_sublayer_forward(s, cfg, tp, out, a.mlp, sc, a.x_mid, w.mlp, drop);
}

void block_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                    const BlockWeights& grad, Tensor dout, const BlockActivations& a, BlockScratch& sc, Tensor inp,
                    const BlockWeights& w, AttentionCore& core, const DropoutSite& drop,
                    const BlockWeightGradInputs& defer, const MoeRuntime* moe) {
  if (w.moe)
    moe_sublayer_backward(s, cfg, tp, *moe, sc.dmid, grad.experts, dout, a.moe, sc, a.x_mid, w.experts, drop);
  else
    mlp_sublayer_backward(s, cfg, tp, sc.dmid, grad.mlp, dout, a.mlp, sc, a.x_mid, w.mlp, drop, defer.mlp);
  attention_sublayer_backward(s, cfg, tp, dinp, grad.attn, sc.dmid, a.attn, sc, inp, w.attn, core, drop, defer.attn);
}

void block_weight_backward(const Stream& s, const TensorParallel& tp, const BlockWeights& grad,
                           const BlockActivations& a, BlockScratch& sc, const BlockWeightGradInputs& defer) {
  if (!grad.moe) mlp_weight_backward(s, tp, grad.mlp, a.mlp, sc, defer.mlp);
  attention_weight_backward(s, tp, grad.attn, a.attn, sc, defer.attn);
}

}  // namespace megatrain
