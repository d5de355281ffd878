// The attention core of a rank that holds whole sequences (model/attention_core.h): the causal
// flash-style kernel over its rows, positions in order.
#pragma once
#include "model/attention_core.h"

namespace megatrain {

class LocalAttention final : public AttentionCore {
 public:
  // B sequences of T rows; heads: this rank's (tensor-parallel) share.
  LocalAttention(int B, int T, AttnHeads heads);

  const RowPositions& base_positions() const override { return positions_; }
  void forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) override;  // lse (B, H, T)
  void backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) override;
  int sequence_ranks() const override { return 1; }
  void sum_over_sequence(std::span<double>) const override {}

 private:
  void use_documents(const int32_t* starts) override;

  int B_, T_;
  RowPositions positions_;
  AttnHeads heads_;
  Tensor first_key_;  // (B, T): the documents' starts, or empty
};

}  // namespace megatrain
