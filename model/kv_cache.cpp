#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace megatrain {
namespace {

// The first m rows of a (R, …) or (R) buffer.
Tensor first_rows(const Tensor& t, int64_t m) {
  Tensor r = t;
  r.shape.dim[0] = m;
  return r;
}


NormActivations first_rows(const NormActivations& a, int64_t m) {
  NormActivations r;
  r.out = first_rows(a.out, m);
  if (a.mean.data) r.mean = first_rows(a.mean, m);
  r.rstd = first_rows(a.rstd, m);
  return r;
}

// An MoE sublayer's activations for m tokens: its per-token tensors cut to m rows (the received
// rows keep their room: m tokens never need more).
MoeActivations first_rows(const MoeActivations& a, int64_t m) {
  MoeActivations r = a;
  r.norm = first_rows(a.norm, m);
  for (Tensor* t : {&r.logits, &r.scores, &r.expert, &r.kept, &r.gates, &r.row}) *t = first_rows(*t, m);
  r.out_send = first_rows(a.out_send, m * a.gates.shape[1]);
  return r;
}

}  // namespace

GptDecoder::GptDecoder(const GptModel& model, int max_chunk)
    : model_(model), cfg_(model.config()),
      R_(max_chunk > 0 ? std::min(max_chunk, cfg_.max_seq_len) : cfg_.max_seq_len),
      whole_(1, R_, AttnHeads{cfg_.n_heads, cfg_.kv_heads(), cfg_.head_dim()}) {
  // Generation routes dropless: capacity bounds a training micro-batch's load, and with it a chunk
  // would keep other tokens than the whole sequence does (the logits would depend on the chunking).
  cfg_.moe.capacity_factor = 0.0f;
  if (cfg_.moe.enabled()) dispatch_.emplace(std::nullopt, cfg_.moe.n_experts, cfg_.d_model);
  Arena measure = Arena::measuring();
  plan(measure);
  arena_ = Arena(measure.used());
  plan(arena_);
}

void GptDecoder::plan(Arena& arena) {
  const int64_t R = R_, C = cfg_.d_model, D = cfg_.head_dim(), H = cfg_.n_heads, Hkv = cfg_.kv_heads();
  const TensorParallel rows(R, C);
  sc_.tokens = Tensor(arena.alloc_i32(R), Shape{R});
  sc_.x = arena.tensor(Shape{R, C});
  sc_.x_mid = arena.tensor(Shape{R, C});
  sc_.attn = attention_activations(arena, cfg_, rows, 1, R_);
  sc_.q = arena.tensor(Shape{R, H * D});
  sc_.mlp = mlp_activations(arena, cfg_, rows, R);
  if (cfg_.moe.enabled()) {
    sc_.moe = moe_activations(arena, cfg_, rows, 1, R);
    sc_.moe_scratch = moe_scratch(arena, cfg_, rows, 1, R);
  }
  sc_.block.proj = arena.tensor(Shape{R, C});
  sc_.final_norm = norm_activations(arena, cfg_, R);
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
      matmul_forward(stream_, Tensor(logits_.data() + c0 * Vp, Shape{m, Vp}), first_rows(sc_.final_norm.out, m),
                     model_.head(), Tensor{});
    } else if (c0 + m == n) {
      matmul_forward(stream_, Tensor(logits_.data(), Shape{1, Vp}),
                     Tensor(sc_.final_norm.out.f32() + (m - 1) * C, Shape{1, C}), model_.head(), Tensor{});
    }
  }
  return Tensor(logits_.data(), Shape{out_rows, Vp});
}

void GptDecoder::run_chunk(const int32_t* tokens, int m) {
  const Stream& s = stream_;
  std::memcpy(sc_.tokens.data, tokens, sizeof(int32_t) * static_cast<size_t>(m));
  embedding_forward(s, first_rows(sc_.x, m), Tensor(sc_.tokens.i32(), Shape{1, m}), model_.wte(), 0);
  if (model_.wpe().data) position_embedding_forward(s, first_rows(sc_.x, m), model_.wpe(), cfg_.max_seq_len, pos_);
  const TensorParallel rows(m, cfg_.d_model);
  for (int l = 0; l < cfg_.n_layers; ++l) block(l, m, rows);
  NormActivations na = first_rows(sc_.final_norm, m);
  norm_forward(s, cfg_, na, first_rows(sc_.x, m), model_.final_norm());
  pos_ += m;
}

// The training block's sublayers on m rows, with attention over the cache in between.
void GptDecoder::block(int layer, int m, const TensorParallel& rows) {
  const Stream& s = stream_;
  const BlockWeights& w = model_.blocks()[static_cast<size_t>(layer)];
  const int H = cfg_.n_heads, Hkv = cfg_.kv_heads(), D = cfg_.head_dim();
  const int64_t qd = static_cast<int64_t>(H) * D, kvd = static_cast<int64_t>(Hkv) * D, row = qd + 2 * kvd;
  const Tensor x = first_rows(sc_.x, m), x_mid = first_rows(sc_.x_mid, m), q = first_rows(sc_.q, m);
  AttentionActivations attn{first_rows(sc_.attn.norm, m), Tensor(sc_.attn.qkv.f32(), Shape{1, m, row}),
                            first_rows(sc_.attn.att, m), Tensor{}};
  BlockScratch sc;
  sc.proj = sc.partial = first_rows(sc_.block.proj, m);
  // Project and rotate at the absolute positions, append K and V to the cache, attend over it.
  attention_in(s, cfg_, rows, attn, sc, x, w.attn, RowPositions::identity(1, m, pos_));
  float* kc = sc_.k[static_cast<size_t>(layer)].f32();
  float* vc = sc_.v[static_cast<size_t>(layer)].f32();
  for (int i = 0; i < m; ++i) {
    const float* r = attn.qkv.f32() + i * row;
    std::memcpy(q.f32() + i * qd, r, sizeof(float) * static_cast<size_t>(qd));
    std::memcpy(kc + (pos_ + i) * kvd, r + qd, sizeof(float) * static_cast<size_t>(kvd));
    std::memcpy(vc + (pos_ + i) * kvd, r + qd + kvd, sizeof(float) * static_cast<size_t>(kvd));
  }
  attention_decode_forward(s, attn.att, q, sc_.k[static_cast<size_t>(layer)], sc_.v[static_cast<size_t>(layer)], H,
                           Hkv, pos_);
  attention_out(s, rows, x_mid, sc, attn.att, x, w.attn, DropoutSite{});
  if (w.moe) {
    MoeActivations moe = first_rows(sc_.moe, m);
    const MoeRuntime runtime{router_spec(cfg_.moe), &*dispatch_, 0.0f, 0.0f, 0.0f, &sc_.moe_scratch, nullptr, &whole_};
    moe_sublayer_forward(s, cfg_, rows, runtime, x, moe, sc, x_mid, w.experts, DropoutSite{});
    return;
  }
  MlpActivations mlp{first_rows(sc_.mlp.norm, m), first_rows(sc_.mlp.fc, m), first_rows(sc_.mlp.act, m)};
  mlp_sublayer_forward(s, cfg_, rows, x, mlp, sc, x_mid, w.mlp, DropoutSite{});
}

}  // namespace megatrain
