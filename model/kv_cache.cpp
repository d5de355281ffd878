#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace megatrain {
namespace {

// The first m rows of a (R, …) or (R) buffer.
Tensor first_rows(const Tensor& t, int64_t m) {
  if (t.shape.ndim == 1) return Tensor(t.f32(), Shape{m});
  return Tensor(t.f32(), Shape{m, t.shape[1]});
}

NormActivations first_rows(const NormActivations& a, int64_t m) {
  NormActivations r;
  r.out = first_rows(a.out, m);
  if (a.mean.data) r.mean = first_rows(a.mean, m);
  r.rstd = first_rows(a.rstd, m);
  return r;
}

}  // namespace

GptDecoder::GptDecoder(const GptModel& model, int max_chunk)
    : model_(model), cfg_(model.config()),
      R_(max_chunk > 0 ? std::min(max_chunk, cfg_.max_seq_len) : cfg_.max_seq_len) {
  Arena measure = Arena::measuring();
  plan(measure);
  arena_ = Arena(measure.used());
  plan(arena_);
}

void GptDecoder::plan(Arena& arena) {
  const int64_t R = R_, C = cfg_.d_model, D = cfg_.head_dim(), H = cfg_.n_heads, Hkv = cfg_.kv_heads();
  const int64_t F = cfg_.ffn_dim(), fc = cfg_.activation == ActivationKind::swiglu ? 2 * F : F;
  sc_.tokens = Tensor(arena.alloc_i32(R), Shape{R});
  sc_.x = arena.tensor(Shape{R, C});
  sc_.x_mid = arena.tensor(Shape{R, C});
  sc_.proj = arena.tensor(Shape{R, C});
  sc_.norm = norm_activations(arena, cfg_, R);
  sc_.qkv = arena.tensor(Shape{R, (H + 2 * Hkv) * D});
  sc_.q = arena.tensor(Shape{R, H * D});
  sc_.att = arena.tensor(Shape{R, H * D});
  sc_.fc = arena.tensor(Shape{R, fc});
  sc_.act = arena.tensor(Shape{R, F});
  sc_.k.clear();
  sc_.v.clear();
  for (int l = 0; l < cfg_.n_layers; ++l) {
    sc_.k.push_back(arena.tensor(Shape{cfg_.max_seq_len, Hkv * D}));
    sc_.v.push_back(arena.tensor(Shape{cfg_.max_seq_len, Hkv * D}));
  }
}

Tensor GptDecoder::forward(std::span<const int32_t> tokens, LogitRows rows) {
  const int n = static_cast<int>(tokens.size());
  MT_CHECK(n > 0, "forward() needs at least one token");
  MT_CHECK(static_cast<int64_t>(pos_) + n <= cfg_.max_seq_len,
           "{} more tokens at position {} exceed max_seq_len {}: reset() or shorten the sequence", n, pos_,
           cfg_.max_seq_len);
  for (int i = 0; i < n; ++i)
    MT_CHECK(tokens[static_cast<size_t>(i)] >= 0 && tokens[static_cast<size_t>(i)] < cfg_.vocab_size,
             "token id {} at chunk row {} is outside [0, {}): the tokenizer does not match model.vocab_size",
             tokens[static_cast<size_t>(i)], i, cfg_.vocab_size);
  const int64_t C = cfg_.d_model, Vp = cfg_.padded_vocab(1);
  const int out_rows = rows == LogitRows::all ? n : 1;
  if (logits_.size() < static_cast<size_t>(out_rows * Vp)) logits_.resize(static_cast<size_t>(out_rows * Vp));
  for (int c0 = 0; c0 < n; c0 += R_) {
    const int m = std::min(R_, n - c0);
    run_chunk(tokens.data() + c0, m);
    if (rows == LogitRows::all) {
      matmul_forward(stream_, Tensor(logits_.data() + c0 * Vp, Shape{m, Vp}), first_rows(sc_.norm.out, m),
                     model_.head(), Tensor{});
    } else if (c0 + m == n) {
      matmul_forward(stream_, Tensor(logits_.data(), Shape{1, Vp}),
                     Tensor(sc_.norm.out.f32() + (m - 1) * C, Shape{1, C}), model_.head(), Tensor{});
    }
  }
  return Tensor(logits_.data(), Shape{out_rows, Vp});
}

void GptDecoder::run_chunk(const int32_t* tokens, int m) {
  const Stream& s = stream_;
  std::memcpy(sc_.tokens.data, tokens, sizeof(int32_t) * static_cast<size_t>(m));
  embedding_forward(s, first_rows(sc_.x, m), Tensor(sc_.tokens.i32(), Shape{1, m}), model_.wte(), 0);
  if (model_.wpe().data) position_embedding_forward(s, first_rows(sc_.x, m), model_.wpe(), cfg_.max_seq_len, pos_);
  for (int l = 0; l < cfg_.n_layers; ++l) block(l, m);
  NormActivations na = first_rows(sc_.norm, m);
  norm_forward(s, cfg_, na, first_rows(sc_.x, m), model_.final_norm());
  pos_ += m;
}

// block_forward (model/block.cpp) without dropout, with attention over the cache.
void GptDecoder::block(int layer, int m) {
  const Stream& s = stream_;
  const BlockWeights& w = model_.weights()[static_cast<size_t>(layer)];
  const int H = cfg_.n_heads, Hkv = cfg_.kv_heads(), D = cfg_.head_dim();
  const int64_t qd = static_cast<int64_t>(H) * D, kvd = static_cast<int64_t>(Hkv) * D, row = qd + 2 * kvd;
  const Tensor x = first_rows(sc_.x, m), x_mid = first_rows(sc_.x_mid, m), proj = first_rows(sc_.proj, m);
  const Tensor qkv = first_rows(sc_.qkv, m), q = first_rows(sc_.q, m), att = first_rows(sc_.att, m);
  NormActivations na = first_rows(sc_.norm, m);
  // Attention half: project, rotate at the absolute positions, append K and V to the cache.
  norm_forward(s, cfg_, na, x, w.attn_norm);
  matmul_forward(s, qkv, na.out, w.qkv_w, w.qkv_b);
  if (cfg_.position == PositionKind::rope)
    rope_apply(s, qkv.reshaped(Shape{1, m, row}), H, Hkv, cfg_.rope_theta, RopeDirection::forward, pos_);
  float* kc = sc_.k[static_cast<size_t>(layer)].f32();
  float* vc = sc_.v[static_cast<size_t>(layer)].f32();
  for (int i = 0; i < m; ++i) {
    const float* r = qkv.f32() + i * row;
    std::memcpy(q.f32() + i * qd, r, sizeof(float) * static_cast<size_t>(qd));
    std::memcpy(kc + (pos_ + i) * kvd, r + qd, sizeof(float) * static_cast<size_t>(kvd));
    std::memcpy(vc + (pos_ + i) * kvd, r + qd + kvd, sizeof(float) * static_cast<size_t>(kvd));
  }
  attention_decode_forward(s, att, q, sc_.k[static_cast<size_t>(layer)], sc_.v[static_cast<size_t>(layer)], H, Hkv,
                           pos_);
  matmul_forward(s, proj, att, w.proj_w, w.proj_b);
  add_forward(s, x_mid, x, proj);
  // MLP half; the block output goes back into x.
  norm_forward(s, cfg_, na, x_mid, w.mlp_norm);
  const Tensor fc = first_rows(sc_.fc, m), act = first_rows(sc_.act, m);
  matmul_forward(s, fc, na.out, w.fc_w, w.fc_b);
  if (cfg_.activation == ActivationKind::gelu)
    gelu_forward(s, act, fc);
  else
    swiglu_forward(s, act, fc);
  matmul_forward(s, proj, act, w.fc2_w, w.fc2_b);
  add_forward(s, x, x_mid, proj);
}

}  // namespace megatrain
