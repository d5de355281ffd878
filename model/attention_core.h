// The attention core of a stage's blocks and how the stage's rows relate to whole sequences — one
// part per way of computing it, chosen once per stage (model/attention_parts.h; the only place that
// reads parallel.cp):
//   LocalAttention   — the rank holds whole sequences (cp = 1);
//   RingAttention    — a cp group holds each sequence, key/value blocks passed around its ring;
//   UlyssesAttention — a cp group holds each sequence, heads redistributed by all-to-all.
// Each computes the causal attention of its rows over the whole sequence, forward and backward, with
// the result of one process (within float32 summation order) — within each document where the
// micro-batch packs several (data.reset_attention_mask: use()).
#pragma once
#include <span>

#include "model/positions.h"

namespace megatrain {

class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  // The micro-batch whose forward or backward runs next (both valid until the next use()): its rows'
  // positions (data.reset_position_ids; null: the part's own, base_positions()), and starts, (B, T)
  // of whole sequences, the first position of each position's document (data.reset_attention_mask;
  // null: attention across documents).
  void use(const RowPositions* positions, const int32_t* starts) {
    positions_in_use_ = positions;
    use_documents(starts);
  }
  // Where the rows sit in their sequences (RoPE, learned positions, dropout keys): the micro-batch's.
  const RowPositions& positions() const { return positions_in_use_ ? *positions_in_use_ : base_positions(); }
  // Without documents: positions in order over the rows this part holds.
  virtual const RowPositions& base_positions() const = 0;
  // att (B·Tl, H·D) and lse from qkv (B, Tl, (H + 2·Hkv)·D) after RoPE; lse's shape is the part's
  // (attention_core_lse_shape).
  virtual void forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) = 0;
  // dqkv ← the gradient of qkv from datt, with forward's att and lse.
  virtual void backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) = 0;
  // The ranks that hold parts of each sequence (1, or cp), and the sum over them of per-rank
  // statistics (the MoE aux loss is the whole sequences'); nothing to add at one rank.
  virtual int sequence_ranks() const = 0;
  virtual void sum_over_sequence(std::span<double> values) const = 0;

 private:
  virtual void use_documents(const int32_t* starts) = 0;
  const RowPositions* positions_in_use_ = nullptr;
};

}  // namespace megatrain
