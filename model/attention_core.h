// The attention core of a stage's blocks and how the stage's rows relate to whole sequences — one
// part per way of computing it, chosen once per stage (model/attention_parts.h; the only place that
// reads parallel.cp):
//   LocalAttention   — the rank holds whole sequences (cp = 1);
//   RingAttention    — a cp group holds each sequence, key/value blocks passed around its ring;
//   UlyssesAttention — a cp group holds each sequence, heads redistributed by all-to-all.
// Each computes the causal attention of its rows over the whole sequence, forward and backward, with
// the result of one process (within float32 summation order).
#pragma once
#include <span>

#include "model/positions.h"

namespace megatrain {

class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  // Where the rows sit in their sequences (RoPE, learned positions, dropout keys).
  virtual const RowPositions& positions() const = 0;
  // att (B·Tl, H·D) and lse from qkv (B, Tl, (H + 2·Hkv)·D) after RoPE; lse's shape is the part's
  // (attention_core_lse_shape).
  virtual void forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) = 0;
  // dqkv ← the gradient of qkv from datt, with forward's att and lse.
  virtual void backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) = 0;
  // The ranks that hold parts of each sequence (1, or cp), and the sum over them of per-rank
  // statistics (the MoE aux loss is the whole sequences'); nothing to add at one rank.
  virtual int sequence_ranks() const = 0;
  virtual void sum_over_sequence(std::span<double> values) const = 0;
};

}  // namespace megatrain
