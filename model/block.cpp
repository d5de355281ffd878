#include "model/block.h"

#include <cstring>

namespace megatrain {
namespace {

RngKey site_key(const DropoutSite& d, uint32_t site) {
  return RngKey{d.seed, static_cast<uint32_t>(RngPurpose::dropout), d.stream_base + site, d.offset};
}

constexpr uint32_t kSiteAttn = 0, kSiteMlp = 1;

}  // namespace

BlockWeights block_weights(const ParamLayout& layout, float* data, int64_t data_begin, int layer) {
  const std::string L = "layers." + std::to_string(layer);
  auto get = [&](const std::string& n) { return layout.view_in(data, data_begin, layout.index_of(L + n)); };
  auto maybe = [&](const std::string& n) { return layout.contains(L + n) ? get(n) : Tensor{}; };
  BlockWeights w;
  w.attn_norm = {get(".attn_norm.weight"), maybe(".attn_norm.bias")};
  w.mlp_norm = {get(".mlp_norm.weight"), maybe(".mlp_norm.bias")};
  w.qkv_w = get(".attn.qkv.weight");
  w.proj_w = get(".attn.proj.weight");
  w.fc_w = get(".mlp.fc.weight");
  w.fc2_w = get(".mlp.proj.weight");
  w.qkv_b = maybe(".attn.qkv.bias");
  w.proj_b = maybe(".attn.proj.bias");
  w.fc_b = maybe(".mlp.fc.bias");
  w.fc2_b = maybe(".mlp.proj.bias");
  return w;
}

BlockActivations block_activations(Arena& arena, const ModelConfig& cfg, int B, int T) {
  const int64_t N = static_cast<int64_t>(B) * T;
  const int64_t qkv = static_cast<int64_t>(cfg.n_heads + 2 * cfg.kv_heads()) * cfg.head_dim();
  const int64_t F = cfg.ffn_dim();
  const int64_t fc = cfg.activation == ActivationKind::swiglu ? 2 * F : F;
  BlockActivations a;
  a.attn_norm = norm_activations(arena, cfg, N);
  a.qkv = arena.tensor(Shape{B, T, qkv});
  a.att = arena.tensor(Shape{N, static_cast<int64_t>(cfg.n_heads) * cfg.head_dim()});
  a.lse = arena.tensor(Shape{B, cfg.n_heads, T});
  a.x_mid = arena.tensor(Shape{N, cfg.d_model});
  a.mlp_norm = norm_activations(arena, cfg, N);
  a.fc = arena.tensor(Shape{N, fc});
  a.act = arena.tensor(Shape{N, F});
  return a;
}

BlockScratch block_scratch(Arena& arena, const ModelConfig& cfg, int B, int T) {
  Arena shapes_only = Arena::measuring();
  const BlockActivations like = block_activations(shapes_only, cfg, B, T);
  BlockScratch sc;
  sc.proj = arena.tensor(like.x_mid.shape);
  sc.dnorm = arena.tensor(like.x_mid.shape);
  sc.dmid = arena.tensor(like.x_mid.shape);
  sc.datt = arena.tensor(like.att.shape);
  sc.dqkv = arena.tensor(like.qkv.shape);
  sc.dfc = arena.tensor(like.fc.shape);
  sc.dact = arena.tensor(like.act.shape);
  return sc;
}

void block_forward(const Stream& s, const ModelConfig& cfg, Tensor out, BlockActivations& a, BlockScratch& sc,
                   Tensor inp, const BlockWeights& w, const DropoutSite& drop) {
  const int H = cfg.n_heads, Hkv = cfg.kv_heads();
  // Attention half.
  norm_forward(s, cfg, a.attn_norm, inp, w.attn_norm);
  matmul_forward(s, a.qkv, a.attn_norm.out, w.qkv_w, w.qkv_b);
  if (cfg.position == PositionKind::rope) rope_apply(s, a.qkv, H, Hkv, cfg.rope_theta, RopeDirection::forward);
  attention_forward(s, a.att, a.lse, a.qkv, H, Hkv);
  matmul_forward(s, sc.proj, a.att, w.proj_w, w.proj_b);
  if (drop.p > 0.0f) dropout_apply(s, sc.proj, drop.p, site_key(drop, kSiteAttn));
  add_forward(s, a.x_mid, inp, sc.proj);
  // MLP half.
  norm_forward(s, cfg, a.mlp_norm, a.x_mid, w.mlp_norm);
  matmul_forward(s, a.fc, a.mlp_norm.out, w.fc_w, w.fc_b);
  if (cfg.activation == ActivationKind::gelu)
    gelu_forward(s, a.act, a.fc);
  else
    swiglu_forward(s, a.act, a.fc);
  matmul_forward(s, sc.proj, a.act, w.fc2_w, w.fc2_b);
  if (drop.p > 0.0f) dropout_apply(s, sc.proj, drop.p, site_key(drop, kSiteMlp));
  add_forward(s, out, a.x_mid, sc.proj);
}

namespace {
// Gradient through inverted dropout: the same mask and scale applied to the incoming gradient.
Tensor through_dropout(const Stream& s, Tensor dout, Tensor scratch, const DropoutSite& drop, uint32_t site) {
  if (drop.p <= 0.0f) return dout;
  std::memcpy(scratch.f32(), dout.f32(), dout.bytes());
  dropout_apply(s, scratch, drop.p, site_key(drop, site));
  return scratch;
}
}  // namespace

void block_backward(const Stream& s, const ModelConfig& cfg, Tensor dinp, const BlockWeights& grad, Tensor dout,
                    const BlockActivations& a, BlockScratch& sc, Tensor inp, const BlockWeights& w,
                    const DropoutSite& drop) {
  const int H = cfg.n_heads, Hkv = cfg.kv_heads();
  // MLP half: dout flows to x_mid directly (residual) and through the MLP.
  Tensor dproj = through_dropout(s, dout, sc.proj, drop, kSiteMlp);
  matmul_backward(s, sc.dact, grad.fc2_w, grad.fc2_b, dproj, a.act, w.fc2_w);
  if (cfg.activation == ActivationKind::gelu)
    gelu_backward(s, sc.dfc, sc.dact, a.fc);
  else
    swiglu_backward(s, sc.dfc, sc.dact, a.fc);
  matmul_backward(s, sc.dnorm, grad.fc_w, grad.fc_b, sc.dfc, a.mlp_norm.out, w.fc_w);
  norm_backward(s, cfg, sc.dmid, grad.mlp_norm, sc.dnorm, dout, a.mlp_norm, a.x_mid, w.mlp_norm);
  // Attention half.
  Tensor dattp = through_dropout(s, sc.dmid, sc.proj, drop, kSiteAttn);
  matmul_backward(s, sc.datt, grad.proj_w, grad.proj_b, dattp, a.att, w.proj_w);
  attention_backward(s, sc.dqkv, sc.datt, a.qkv, a.att, a.lse, H, Hkv);
  if (cfg.position == PositionKind::rope) rope_apply(s, sc.dqkv, H, Hkv, cfg.rope_theta, RopeDirection::backward);
  matmul_backward(s, sc.dnorm, grad.qkv_w, grad.qkv_b, sc.dqkv, a.attn_norm.out, w.qkv_w);
  norm_backward(s, cfg, dinp, grad.attn_norm, sc.dnorm, sc.dmid, a.attn_norm, inp, w.attn_norm);
}

}  // namespace megatrain
