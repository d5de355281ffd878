#include "model/block.h"

#include <cstring>

#include "model/linear.h"

namespace megatrain {
namespace {

RngKey site_key(const DropoutSite& d, uint32_t site) {
  return RngKey{d.seed, static_cast<uint32_t>(RngPurpose::dropout), d.stream_base + site, d.offset};
}

constexpr uint32_t kSiteAttn = 0, kSiteMlp = 1;

LocalDims local_of(const ModelConfig& cfg, const TensorParallel& tp) {
  return local_dims(cfg, TpCoord{tp.rank(), tp.size()});
}

// A norm output entered into the tp region: gathered into the scratch with sequence parallelism
// (again in backward, as Megatron does, instead of saving N rows per layer), else the output itself.
Tensor enter_region(const TensorParallel& tp, const NormActivations& norm, Tensor gathered) {
  const Tensor full = tp.sequence_parallel() ? gathered : norm.out;
  tp.enter_forward(full, norm.out);
  return full;
}

// The full-rows buffer of a region boundary: a scratch of its own with sequence parallelism,
// otherwise the local tensor itself (parallel/mappings.h).
Tensor full_rows(const TensorParallel& tp, Tensor local, Tensor scratch) {
  return tp.sequence_parallel() ? scratch : local;
}

}  // namespace

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
  w.attn_norm = {v(x.attn_norm_w), v(x.attn_norm_b)};
  w.mlp_norm = {v(x.mlp_norm_w), v(x.mlp_norm_b)};
  w.qkv_w = v(x.qkv_w);
  w.qkv_b = v(x.qkv_b);
  w.proj_w = v(x.proj_w);
  w.proj_b = v(x.proj_b);
  w.fc_w = v(x.fc_w);
  w.fc_b = v(x.fc_b);
  w.fc2_w = v(x.fc2_w);
  w.fc2_b = v(x.fc2_b);
  return w;
}

BlockActivations block_activations(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B, int T) {
  const LocalDims L = local_of(cfg, tp);
  const int64_t N = static_cast<int64_t>(B) * T, Nl = tp.local_rows(), C = cfg.d_model, D = cfg.head_dim();
  const int64_t fc = cfg.activation == ActivationKind::swiglu ? 2 * L.ffn : L.ffn;
  BlockActivations a;
  a.attn_norm = norm_activations(arena, cfg, Nl);
  a.qkv = arena.tensor(Shape{B, T, (L.heads + 2 * L.kv_heads) * D});
  a.att = arena.tensor(Shape{N, L.heads * D});
  a.lse = arena.tensor(Shape{B, L.heads, T});
  a.x_mid = arena.tensor(Shape{Nl, C});
  a.mlp_norm = norm_activations(arena, cfg, Nl);
  a.fc = arena.tensor(Shape{N, fc});
  a.act = arena.tensor(Shape{N, L.ffn});
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
  sc.datt = arena.tensor(like.att.shape);
  sc.dqkv = arena.tensor(like.qkv.shape);
  sc.dfc = arena.tensor(like.fc.shape);
  sc.dact = arena.tensor(like.act.shape);
  return sc;
}

void block_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor out,
                   BlockActivations& a, BlockScratch& sc, Tensor inp, const BlockWeights& w, const DropoutSite& drop) {
  const LocalDims L = local_of(cfg, tp);
  // Attention half.
  norm_forward(s, cfg, a.attn_norm, inp, w.attn_norm);
  column_parallel_forward(s, a.qkv, enter_region(tp, a.attn_norm, sc.gathered), w.qkv_w, w.qkv_b);
  if (cfg.position == PositionKind::rope)
    rope_apply(s, a.qkv, L.heads, L.kv_heads, cfg.rope_theta, RopeDirection::forward);
  attention_forward(s, a.att, a.lse, a.qkv, L.heads, L.kv_heads);
  row_parallel_forward(s, tp, sc.proj, sc.partial, a.att, w.proj_w, w.proj_b);
  if (drop.p > 0.0f) dropout_apply(s, sc.proj, drop.p, site_key(drop, kSiteAttn));
  add_forward(s, a.x_mid, inp, sc.proj);
  // MLP half.
  norm_forward(s, cfg, a.mlp_norm, a.x_mid, w.mlp_norm);
  column_parallel_forward(s, a.fc, enter_region(tp, a.mlp_norm, sc.gathered), w.fc_w, w.fc_b);
  if (cfg.activation == ActivationKind::gelu)
    gelu_forward(s, a.act, a.fc);
  else
    swiglu_forward(s, a.act, a.fc);
  row_parallel_forward(s, tp, sc.proj, sc.partial, a.act, w.fc2_w, w.fc2_b);
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

void block_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                    const BlockWeights& grad, Tensor dout, const BlockActivations& a, BlockScratch& sc, Tensor inp,
                    const BlockWeights& w, const DropoutSite& drop) {
  const LocalDims L = local_of(cfg, tp);
  // MLP half: dout flows to x_mid directly (residual) and through the MLP.
  Tensor dproj = through_dropout(s, dout, sc.proj, drop, kSiteMlp);
  row_parallel_backward(s, tp, sc.dact, grad.fc2_w, grad.fc2_b, full_rows(tp, dproj, sc.partial), dproj, a.act,
                        w.fc2_w);
  if (cfg.activation == ActivationKind::gelu)
    gelu_backward(s, sc.dfc, sc.dact, a.fc);
  else
    swiglu_backward(s, sc.dfc, sc.dact, a.fc);
  column_parallel_backward(s, tp, sc.dnorm, full_rows(tp, sc.dnorm, sc.dfull), grad.fc_w, grad.fc_b, sc.dfc,
                           enter_region(tp, a.mlp_norm, sc.gathered), w.fc_w);
  norm_backward(s, cfg, sc.dmid, grad.mlp_norm, sc.dnorm, dout, a.mlp_norm, a.x_mid, w.mlp_norm);
  // Attention half.
  Tensor dattp = through_dropout(s, sc.dmid, sc.proj, drop, kSiteAttn);
  row_parallel_backward(s, tp, sc.datt, grad.proj_w, grad.proj_b, full_rows(tp, dattp, sc.partial), dattp, a.att,
                        w.proj_w);
  attention_backward(s, sc.dqkv, sc.datt, a.qkv, a.att, a.lse, L.heads, L.kv_heads);
  if (cfg.position == PositionKind::rope)
    rope_apply(s, sc.dqkv, L.heads, L.kv_heads, cfg.rope_theta, RopeDirection::backward);
  column_parallel_backward(s, tp, sc.dnorm, full_rows(tp, sc.dnorm, sc.dfull), grad.qkv_w, grad.qkv_b, sc.dqkv,
                           enter_region(tp, a.attn_norm, sc.gathered), w.qkv_w);
  norm_backward(s, cfg, dinp, grad.attn_norm, sc.dnorm, sc.dmid, a.attn_norm, inp, w.attn_norm);
}

}  // namespace megatrain
