#include "model/ulysses_attention.h"

#include <vector>

namespace megatrain {

UlyssesAttention::Buffers UlyssesAttention::plan(Arena& arena, const CpAttentionSpec& spec) {
  const int64_t B = spec.B, Tl = spec.split.local_len(), T = spec.split.seq_len, D = spec.heads.head_dim;
  const int64_t H = spec.heads.n_heads, Hkv = spec.heads.n_kv_heads, P = spec.split.cp, w = (H + 2 * Hkv) / P * D;
  Buffers b;
  b.send = arena.tensor(Shape{B * Tl * (H + 2 * Hkv) * D});
  b.recv = arena.tensor(b.send.shape);
  b.full_qkv = arena.tensor(Shape{B, T, w});
  b.full_dqkv = arena.tensor(Shape{B, T, w});
  b.full_att = arena.tensor(Shape{B, T, H / P * D});
  b.full_dout = arena.tensor(b.full_att.shape);
  return b;
}

UlyssesAttention::UlyssesAttention(Comm cp, const CpAttentionSpec& spec, const Buffers& buffers)
    : CpAttention(std::move(cp), spec), buf_(buffers) {
  MT_CHECK(heads_.n_heads % split_.cp == 0 && heads_.n_kv_heads % split_.cp == 0,
           "all_to_all context parallelism needs cp {} to divide this rank's {} query and {} key/value heads",
           split_.cp, heads_.n_heads, heads_.n_kv_heads);
}

void UlyssesAttention::use_documents(const int32_t* starts) {
  first_key_ = starts ? Tensor(const_cast<int32_t*>(starts), Shape{B_, split_.seq_len}) : Tensor{};
}

void UlyssesAttention::exchange(const Stream& s, Tensor local, std::span<const ColGroup> groups, Tensor full,
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
    if (to_full)
      columns(segment(buf_.send, p), p, true);
    else
      chunks(segment(buf_.send, p), p, true);
  }
  const std::vector<int64_t> counts(static_cast<size_t>(P), seg);
  comm_.all_to_all(buf_.recv.f32(), counts, buf_.send.f32(), counts).wait();
  for (int p = 0; p < P; ++p) {  // unpack what rank p sent
    if (to_full)
      chunks(segment(buf_.recv, p), p, false);
    else
      columns(segment(buf_.recv, p), p, false);
  }
}

std::vector<UlyssesAttention::ColGroup> UlyssesAttention::qkv_groups() const {
  const int64_t P = split_.cp, D = heads_.head_dim, qw = heads_.n_heads * D, kvw = heads_.n_kv_heads * D;
  return {{0, qw / P}, {qw, kvw / P}, {qw + kvw, kvw / P}};
}

void UlyssesAttention::forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) {
  const int P = split_.cp, Tl = split_.local_len(), T = split_.seq_len;
  const int64_t qw = int64_t{heads_.n_heads} * heads_.head_dim;
  const std::vector<ColGroup> qkv_cols = qkv_groups(), att_cols{{0, qw / P}};
  exchange(s, qkv, qkv_cols, buf_.full_qkv, true);
  attention_forward(s, buf_.full_att, lse.reshaped(Shape{B_, heads_.n_heads / P, T}), buf_.full_qkv, heads_.n_heads / P,
                    heads_.n_kv_heads / P, first_key_);
  exchange(s, att.reshaped(Shape{B_, Tl, qw}), att_cols, buf_.full_att, false);
}

void UlyssesAttention::backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) {
  const int P = split_.cp, Tl = split_.local_len(), T = split_.seq_len;
  const int64_t qw = int64_t{heads_.n_heads} * heads_.head_dim;
  const std::vector<ColGroup> qkv_cols = qkv_groups(), att_cols{{0, qw / P}};
  exchange(s, qkv, qkv_cols, buf_.full_qkv, true);
  exchange(s, att.reshaped(Shape{B_, Tl, qw}), att_cols, buf_.full_att, true);
  exchange(s, datt.reshaped(Shape{B_, Tl, qw}), att_cols, buf_.full_dout, true);
  attention_backward(s, buf_.full_dqkv, buf_.full_dout, buf_.full_qkv, buf_.full_att,
                     lse.reshaped(Shape{B_, heads_.n_heads / P, T}), heads_.n_heads / P, heads_.n_kv_heads / P,
                     first_key_);
  exchange(s, dqkv, qkv_cols, buf_.full_dqkv, false);
}

}  // namespace megatrain
