// What the context-parallel attention parts share (model/ring_attention.h,
// model/ulysses_attention.h): the cp group, this rank's split of each sequence, the rows' positions
// in it, and the sum of per-rank statistics over the group (model/attention_core.h).
#pragma once
#include <span>

#include "model/attention_core.h"
#include "parallel/comm.h"

namespace megatrain {

// What a cp part is for: this rank's split of each sequence, B sequences, this rank's
// (tensor-parallel) heads.
struct CpAttentionSpec {
  CpSplit split;
  int B = 1;
  AttnHeads heads{};
};

class CpAttention : public AttentionCore {
 public:
  const RowPositions& base_positions() const override { return positions_; }
  int sequence_ranks() const override { return comm_.size(); }
  void sum_over_sequence(std::span<double> values) const override;

 protected:
  // Checks that `cp` is the split's group and the split cuts sequences into 2·cp chunks.
  CpAttention(Comm cp, const CpAttentionSpec& spec);

  Comm comm_;
  CpSplit split_;
  int B_;
  AttnHeads heads_;
  RowPositions positions_;
};

}  // namespace megatrain
