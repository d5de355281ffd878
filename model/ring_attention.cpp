#include "model/ring_attention.h"

#include <algorithm>

namespace megatrain {
namespace {

constexpr int kKvTag = 71, kGradTag = 72;  // the ring's key/value blocks and their gradients

}  // namespace

RingAttention::Buffers RingAttention::plan(Arena& arena, const CpAttentionSpec& spec) {
  const int64_t B = spec.B, Tl = spec.split.local_len(), D = spec.heads.head_dim;
  const int64_t H = spec.heads.n_heads, Hkv = spec.heads.n_kv_heads;
  Buffers b;
  for (Tensor* t : {&b.kv[0], &b.kv[1], &b.dkv[0], &b.dkv[1], &b.dkv_in}) *t = arena.tensor(Shape{B, Tl, 2 * Hkv * D});
  b.part = arena.tensor(Shape{B, Tl, H * D});
  b.part_lse = arena.tensor(Shape{B, H, Tl});
  return b;
}

RingAttention::RingAttention(Comm cp, const CpAttentionSpec& spec, const Buffers& buffers)
    : CpAttention(std::move(cp), spec), buf_(buffers) {}

void RingAttention::use_documents(const int32_t* starts) {
  const int P = split_.cp, Tl = split_.local_len(), T = split_.seq_len, c = split_.chunk();
  if (!starts) return first_.clear();
  first_.resize(static_cast<size_t>(P) * static_cast<size_t>(B_) * static_cast<size_t>(Tl));
  for (int j = 0; j < P; ++j)
    for (int b = 0; b < B_; ++b)
      for (int t = 0; t < Tl; ++t) {
        const int start = starts[int64_t{b} * T + split_.position(t)];
        int rows = 0;  // rank j's rows before the document's start: of its two chunks, in order
        for (int k = 0; k < 2; ++k) rows += std::clamp(start - split_.chunk_of(k, j) * c, 0, c);
        first_[(static_cast<size_t>(j) * B_ + b) * Tl + t] = rows;
      }
}

Tensor RingAttention::first_keys(int j) {
  if (first_.empty()) return {};
  const int64_t n = int64_t{B_} * split_.local_len();
  return Tensor(first_.data() + j * n, Shape{B_, split_.local_len()});
}

void RingAttention::forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) {
  const int P = split_.cp, r = split_.rank, Tl = split_.local_len(), c = split_.chunk();
  const int64_t qw = int64_t{heads_.n_heads} * heads_.head_dim, kvw = int64_t{heads_.n_kv_heads} * heads_.head_dim;
  const Tensor out = att.reshaped(Shape{B_, Tl, qw});
  const AttnRows q_all{qkv, 0, 0, Tl};
  attention_rows_copy(s, {buf_.kv[0], 0, 0, Tl}, {qkv, qw, 0, Tl}, 2 * kvw, false);
  Work moving;
  int cur = 0;
  for (int i = 0; i < P; ++i) {
    if (i > 0) {
      moving.wait();
      cur ^= 1;
    }
    if (i + 1 < P)  // the block on to the next rank, the following one in, during this block's attention
      moving =
          comm_.send_recv(buf_.kv[cur].f32(), buf_.kv[cur ^ 1].f32(), buf_.kv[cur].numel(), next(), prev(), kKvTag);
    const int j = (r - i + P) % P;
    const Tensor kv = buf_.kv[cur];
    const Tensor first = first_keys(j);
    if (i == 0) {
      attention_block_forward(s, {out, 0, 0, Tl}, lse, q_all, {qkv, qw, 0, Tl}, {qkv, qw + kvw, 0, Tl}, heads_, true,
                              first);
    } else if (j < r) {
      attention_block_forward(s, {buf_.part, 0, 0, Tl}, buf_.part_lse, q_all, {kv, 0, 0, c}, {kv, kvw, 0, c}, heads_,
                              false, first);
      attention_merge(s, {out, 0, 0, Tl}, lse, {buf_.part, 0, 0, Tl}, buf_.part_lse, heads_);
    } else {
      attention_block_forward(s, {buf_.part, 0, c, c}, buf_.part_lse, {qkv, 0, c, c}, {kv, 0, 0, Tl}, {kv, kvw, 0, Tl},
                              heads_, false, first);
      attention_merge(s, {out, 0, c, c}, lse, {buf_.part, 0, c, c}, buf_.part_lse, heads_);
    }
  }
}

void RingAttention::backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) {
  const int P = split_.cp, r = split_.rank, Tl = split_.local_len(), c = split_.chunk();
  const int64_t qw = int64_t{heads_.n_heads} * heads_.head_dim, kvw = int64_t{heads_.n_kv_heads} * heads_.head_dim;
  const Tensor out = att.reshaped(Shape{B_, Tl, qw}), dout = datt.reshaped(Shape{B_, Tl, qw});
  // One pair of chunks of the own block: queries of local chunk a, keys of local chunk b, gradients
  // into dqkv (the own keys' and values' too).
  const Tensor own_first = first_keys(r);
  const auto own = [&](int a, int b, bool causal) {
    attention_block_backward(s, {dqkv, 0, a * c, c}, {dqkv, qw, b * c, c}, {dqkv, qw + kvw, b * c, c},
                             {dout, 0, a * c, c}, {qkv, 0, a * c, c}, {qkv, qw, b * c, c}, {qkv, qw + kvw, b * c, c},
                             {out, 0, a * c, c}, lse, heads_, causal, own_first);
  };
  zero_fill(s, dqkv);
  attention_rows_copy(s, {buf_.kv[0], 0, 0, Tl}, {qkv, qw, 0, Tl}, 2 * kvw, false);
  // The key/value blocks, and the gradients (the sum sent on, the next one in).
  Work moving = comm_.send_recv(buf_.kv[0].f32(), buf_.kv[1].f32(), buf_.kv[0].numel(), next(), prev(), kKvTag),
       grads[2];
  own(1, 0, false);  // the own block's off-diagonal part while the first block comes in
  int cur = 0;
  for (int i = 1; i < P; ++i) {
    moving.wait();
    cur ^= 1;
    if (i + 1 < P)
      moving =
          comm_.send_recv(buf_.kv[cur].f32(), buf_.kv[cur ^ 1].f32(), buf_.kv[cur].numel(), next(), prev(), kKvTag);
    const int j = (r - i + P) % P;
    const Tensor kv = buf_.kv[cur], dkv = buf_.dkv[i % 2];
    grads[i % 2].wait();  // this buffer's sum of two steps ago has left
    zero_fill(s, dkv);
    if (j < r) {
      attention_block_backward(s, {dqkv, 0, 0, Tl}, {dkv, 0, 0, c}, {dkv, kvw, 0, c}, {dout, 0, 0, Tl}, {qkv, 0, 0, Tl},
                               {kv, 0, 0, c}, {kv, kvw, 0, c}, {out, 0, 0, Tl}, lse, heads_, false, first_keys(j));
    } else {
      attention_block_backward(s, {dqkv, 0, c, c}, {dkv, 0, 0, Tl}, {dkv, kvw, 0, Tl}, {dout, 0, c, c}, {qkv, 0, c, c},
                               {kv, 0, 0, Tl}, {kv, kvw, 0, Tl}, {out, 0, c, c}, lse, heads_, false, first_keys(j));
    }
    if (i > 1) {  // the block's gradient so far, from the ranks it visited before this one
      grads[(i + 1) % 2].wait();
      attention_rows_copy(s, {dkv, 0, 0, Tl}, {buf_.dkv_in, 0, 0, Tl}, 2 * kvw, true);
    }
    // The sum on to the next rank (after the last step: to the block's owner); in, the next block's
    // sum so far (after the last step: this rank's own block's, from every other rank).
    grads[i % 2] = comm_.send_recv(dkv.f32(), buf_.dkv_in.f32(), dkv.numel(), next(), prev(), kGradTag);
  }
  own(0, 0, true);  // the own block's diagonal parts while the own block's gradient comes home
  own(1, 1, true);
  grads[(P - 1) % 2].wait();
  attention_rows_copy(s, {dqkv, qw, 0, Tl}, {buf_.dkv_in, 0, 0, Tl}, 2 * kvw, true);
  grads[P % 2].wait();
}

}  // namespace megatrain
