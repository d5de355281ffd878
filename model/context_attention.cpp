#include "model/context_attention.h"

#include <vector>

namespace megatrain {
namespace {

constexpr int kKvTag = 71, kGradTag = 72;  // the ring's key/value blocks and their gradients

}  // namespace

ContextAttention::ContextAttention(std::optional<Comm> cp, CpComm algo, const CpSplit& split, int B, AttnHeads heads)
    : comm_(std::move(cp)), algo_(algo), split_(split), B_(B), heads_(heads) {
  MT_CHECK(split.cp > 1 && split.seq_len % (2 * split.cp) == 0,
           "context attention needs cp > 1 and seq_len a multiple of 2·cp, got cp {} and seq_len {}", split.cp,
           split.seq_len);
  MT_CHECK(!comm_ || (comm_->size() == split.cp && comm_->rank() == split.rank),
           "the cp group has {} ranks (this one {}), the split says cp {} rank {}", comm_->size(), comm_->rank(),
           split.cp, split.rank);
  MT_CHECK(algo != CpComm::all_to_all || (heads.n_heads % split.cp == 0 && heads.n_kv_heads % split.cp == 0),
           "all_to_all context parallelism needs cp {} to divide this rank's {} query and {} key/value heads",
           split.cp, heads.n_heads, heads.n_kv_heads);
}

void ContextAttention::plan(Arena& arena) {
  const int64_t B = B_, Tl = split_.local_len(), T = split_.seq_len, D = heads_.head_dim;
  const int64_t H = heads_.n_heads, Hkv = heads_.n_kv_heads;
  if (algo_ == CpComm::ring) {
    for (Tensor* t : {&kv_[0], &kv_[1], &dkv_[0], &dkv_[1], &dkv_in_}) *t = arena.tensor(Shape{B, Tl, 2 * Hkv * D});
    part_ = arena.tensor(Shape{B, Tl, H * D});
    part_lse_ = arena.tensor(Shape{B, H, Tl});
    return;
  }
  const int64_t P = split_.cp, w = (H + 2 * Hkv) / P * D;
  send_ = arena.tensor(Shape{B * Tl * (H + 2 * Hkv) * D});
  recv_ = arena.tensor(send_.shape);
  full_qkv_ = arena.tensor(Shape{B, T, w});
  full_dqkv_ = arena.tensor(Shape{B, T, w});
  full_att_ = arena.tensor(Shape{B, T, H / P * D});
  full_dout_ = arena.tensor(full_att_.shape);
}

void ContextAttention::forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) {
  if (algo_ == CpComm::ring) return ring_forward(s, att, lse, qkv);
  a2a_forward(s, att, lse, qkv);
}

void ContextAttention::backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) {
  if (algo_ == CpComm::ring) return ring_backward(s, dqkv, datt, qkv, att, lse);
  a2a_backward(s, dqkv, datt, qkv, att, lse);
}

void ContextAttention::rope(const Stream& s, Tensor qkv, float theta, RopeDirection dir) const {
  const int64_t Tl = split_.local_len(), c = split_.chunk(), w = qkv.numel() / (B_ * Tl);
  for (int64_t b = 0; b < B_; ++b)
    for (int k = 0; k < 2; ++k)
      rope_apply(s, qkv.part((b * Tl + k * c) * w, Shape{1, c, w}), heads_.n_heads, heads_.n_kv_heads, theta, dir,
                 split_.chunk_of(k) * static_cast<int>(c));
}

void ContextAttention::ring_forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) {
  const int P = split_.cp, r = split_.rank, Tl = split_.local_len(), c = split_.chunk();
  const int64_t qw = int64_t{heads_.n_heads} * heads_.head_dim, kvw = int64_t{heads_.n_kv_heads} * heads_.head_dim;
  const Tensor out = att.reshaped(Shape{B_, Tl, qw});
  const AttnRows q_all{qkv, 0, 0, Tl};
  attention_rows_copy(s, {kv_[0], 0, 0, Tl}, {qkv, qw, 0, Tl}, 2 * kvw, false);
  Work moving;
  int cur = 0;
  for (int i = 0; i < P; ++i) {
    if (i > 0) {
      moving.wait();
      cur ^= 1;
    }
    if (i + 1 < P)  // the block on to the next rank, the following one in, during this block's attention
      moving = comm_->send_recv(kv_[cur].f32(), kv_[cur ^ 1].f32(), kv_[cur].numel(), next(), prev(), kKvTag);
    const int j = (r - i + P) % P;
    const Tensor kv = kv_[cur];
    if (i == 0) {
      attention_block_forward(s, {out, 0, 0, Tl}, lse, q_all, {qkv, qw, 0, Tl}, {qkv, qw + kvw, 0, Tl}, heads_, true);
    } else if (j < r) {
      attention_block_forward(s, {part_, 0, 0, Tl}, part_lse_, q_all, {kv, 0, 0, c}, {kv, kvw, 0, c}, heads_, false);
      attention_merge(s, {out, 0, 0, Tl}, lse, {part_, 0, 0, Tl}, part_lse_, heads_);
    } else {
      attention_block_forward(s, {part_, 0, c, c}, part_lse_, {qkv, 0, c, c}, {kv, 0, 0, Tl}, {kv, kvw, 0, Tl}, heads_,
                              false);
      attention_merge(s, {out, 0, c, c}, lse, {part_, 0, c, c}, part_lse_, heads_);
    }
  }
}

void ContextAttention::ring_backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) {
  const int P = split_.cp, r = split_.rank, Tl = split_.local_len(), c = split_.chunk();
  const int64_t qw = int64_t{heads_.n_heads} * heads_.head_dim, kvw = int64_t{heads_.n_kv_heads} * heads_.head_dim;
  const Tensor out = att.reshaped(Shape{B_, Tl, qw}), dout = datt.reshaped(Shape{B_, Tl, qw});
  // One pair of chunks of the own block: queries of local chunk a, keys of local chunk b, gradients
  // into dqkv (the own keys' and values' too).
  const auto own = [&](int a, int b, bool causal) {
    attention_block_backward(s, {dqkv, 0, a * c, c}, {dqkv, qw, b * c, c}, {dqkv, qw + kvw, b * c, c},
                             {dout, 0, a * c, c}, {qkv, 0, a * c, c}, {qkv, qw, b * c, c}, {qkv, qw + kvw, b * c, c},
                             {out, 0, a * c, c}, lse, heads_, causal);
  };
  zero_fill(s, dqkv);
  attention_rows_copy(s, {kv_[0], 0, 0, Tl}, {qkv, qw, 0, Tl}, 2 * kvw, false);
  // The key/value blocks, and the gradients (the sum sent on, the next one in).
  Work moving = comm_->send_recv(kv_[0].f32(), kv_[1].f32(), kv_[0].numel(), next(), prev(), kKvTag), grads[2];
  own(1, 0, false);  // the own block's off-diagonal part while the first block comes in
  int cur = 0;
  for (int i = 1; i < P; ++i) {
    moving.wait();
    cur ^= 1;
    if (i + 1 < P)
      moving = comm_->send_recv(kv_[cur].f32(), kv_[cur ^ 1].f32(), kv_[cur].numel(), next(), prev(), kKvTag);
    const int j = (r - i + P) % P;
    const Tensor kv = kv_[cur], dkv = dkv_[i % 2];
    grads[i % 2].wait();  // this buffer's sum of two steps ago has left
    zero_fill(s, dkv);
    if (j < r) {
      attention_block_backward(s, {dqkv, 0, 0, Tl}, {dkv, 0, 0, c}, {dkv, kvw, 0, c}, {dout, 0, 0, Tl},
                               {qkv, 0, 0, Tl}, {kv, 0, 0, c}, {kv, kvw, 0, c}, {out, 0, 0, Tl}, lse, heads_, false);
    } else {
      attention_block_backward(s, {dqkv, 0, c, c}, {dkv, 0, 0, Tl}, {dkv, kvw, 0, Tl}, {dout, 0, c, c},
                               {qkv, 0, c, c}, {kv, 0, 0, Tl}, {kv, kvw, 0, Tl}, {out, 0, c, c}, lse, heads_, false);
    }
    if (i > 1) {  // the block's gradient so far, from the ranks it visited before this one
      grads[(i + 1) % 2].wait();
      attention_rows_copy(s, {dkv, 0, 0, Tl}, {dkv_in_, 0, 0, Tl}, 2 * kvw, true);
    }
    // The sum on to the next rank (after the last step: to the block's owner); in, the next block's
    // sum so far (after the last step: this rank's own block's, from every other rank).
    grads[i % 2] = comm_->send_recv(dkv.f32(), dkv_in_.f32(), dkv.numel(), next(), prev(), kGradTag);
  }
  own(0, 0, true);  // the own block's diagonal parts while the own block's gradient comes home
  own(1, 1, true);
  grads[(P - 1) % 2].wait();
  attention_rows_copy(s, {dqkv, qw, 0, Tl}, {dkv_in_, 0, 0, Tl}, 2 * kvw, true);
  grads[P % 2].wait();
}

void ContextAttention::exchange(const Stream& s, Tensor local, std::span<const ColGroup> groups, Tensor full,
                                bool to_full) {
  const int P = split_.cp, Tl = split_.local_len(), c = split_.chunk();
  int64_t w = 0;
  for (const ColGroup& g : groups) w += g.width;
  const int64_t seg = int64_t{B_} * Tl * w;
  // Rank p's segment of `buf`, (B, Tl, w), and the copies between it and the local tensor (rank p's
  // heads' columns of the local rows) or the full one (rank p's chunks of the sequence).
  const auto segment = [&](Tensor buf, int p) { return buf.part(p * seg, Shape{B_, Tl, w}); };
  const auto columns = [&](Tensor sp, int p, bool into_segment) {
    int64_t col = 0;
    for (const ColGroup& g : groups) {
      const AttnRows seg_rows{sp, col, 0, Tl}, local_rows{local, g.first + p * g.width, 0, Tl};
      attention_rows_copy(s, into_segment ? seg_rows : local_rows, into_segment ? local_rows : seg_rows, g.width,
                          false);
      col += g.width;
    }
  };
  const auto chunks = [&](Tensor sp, int p, bool into_segment) {
    for (int k = 0; k < 2; ++k) {
      const AttnRows seg_rows{sp, 0, k * c, c}, full_rows{full, 0, split_.chunk_of(k, p) * c, c};
      attention_rows_copy(s, into_segment ? seg_rows : full_rows, into_segment ? full_rows : seg_rows, w, false);
    }
  };
  for (int p = 0; p < P; ++p) {  // pack
    if (to_full) columns(segment(send_, p), p, true);
    else chunks(segment(send_, p), p, true);
  }
  const std::vector<int64_t> counts(static_cast<size_t>(P), seg);
  comm_->all_to_all(recv_.f32(), counts, send_.f32(), counts).wait();
  for (int p = 0; p < P; ++p) {  // unpack what rank p sent
    if (to_full) chunks(segment(recv_, p), p, false);
    else columns(segment(recv_, p), p, false);
  }
}

std::vector<ContextAttention::ColGroup> ContextAttention::qkv_groups() const {
  const int64_t P = split_.cp, D = heads_.head_dim, qw = heads_.n_heads * D, kvw = heads_.n_kv_heads * D;
  return {{0, qw / P}, {qw, kvw / P}, {qw + kvw, kvw / P}};
}

void ContextAttention::a2a_forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) {
  const int P = split_.cp, Tl = split_.local_len(), T = split_.seq_len;
  const int64_t qw = int64_t{heads_.n_heads} * heads_.head_dim;
  const std::vector<ColGroup> qkv_cols = qkv_groups(), att_cols{{0, qw / P}};
  exchange(s, qkv, qkv_cols, full_qkv_, true);
  attention_forward(s, full_att_, lse.reshaped(Shape{B_, heads_.n_heads / P, T}), full_qkv_, heads_.n_heads / P,
                    heads_.n_kv_heads / P);
  exchange(s, att.reshaped(Shape{B_, Tl, qw}), att_cols, full_att_, false);
}

void ContextAttention::a2a_backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) {
  const int P = split_.cp, Tl = split_.local_len(), T = split_.seq_len;
  const int64_t qw = int64_t{heads_.n_heads} * heads_.head_dim;
  const std::vector<ColGroup> qkv_cols = qkv_groups(), att_cols{{0, qw / P}};
  exchange(s, qkv, qkv_cols, full_qkv_, true);
  exchange(s, att.reshaped(Shape{B_, Tl, qw}), att_cols, full_att_, true);
  exchange(s, datt.reshaped(Shape{B_, Tl, qw}), att_cols, full_dout_, true);
  attention_backward(s, full_dqkv_, full_dout_, full_qkv_, full_att_, lse.reshaped(Shape{B_, heads_.n_heads / P, T}),
                     heads_.n_heads / P, heads_.n_kv_heads / P);
  exchange(s, dqkv, qkv_cols, full_dqkv_, false);
}

}  // namespace megatrain
