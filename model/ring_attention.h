// Context parallelism's ring attention (parallel.cp > 1, parallel.cp_comm = "ring";
// model/attention_core.h). Each rank of a cp group holds 1/cp of every sequence (the balanced
// split, parallel/context_parallel.h); the key/value heads of each rank's rows travel once around
// the ring (GQA: only the n_kv_heads). At step i rank r holds the block of rank j = r − i (mod cp)
// and attends to it while the block is already being sent on and the next received (the sends
// overlap the block's attention). Which pairs see each other follows from the split (chunks r,
// 2cp−1−r against j, 2cp−1−j): step 0 is the rank's own rows with the causal mask; for j < r every
// local query sees the block's first chunk and not its second; for j > r only the second local chunk
// sees anything, and it sees the whole block. Each step's output and log-sum-exp are merged into the
// running ones (attention_merge). Backward passes the blocks around again, each with the gradient of
// its keys and values: rank r adds its contribution to block j's dK/dV and sends the sum on, so after
// cp steps every block's gradient returns to its owner.
//
// Documents (data.reset_attention_mask): a query row sees no row of a block before its document's
// start; as the positions of a rank's rows rise with the row, that is a first visible row per query
// row and source rank (first_keys), computed once per micro-batch from the whole sequences' starts.
//
// The group's communicator counts the time its messages were in flight and the time the attention
// waited for them (CommStats busy_ms, exposed_ms: the step's cp_comm_ms and cp_exposed_ms).
#pragma once
#include <vector>

#include "model/cp_attention.h"

namespace megatrain {

class RingAttention final : public CpAttention {
 public:
  // Key/value blocks in flight, their gradients, one block's output and lse.
  struct Buffers {
    Tensor kv[2], dkv[2], dkv_in, part, part_lse;
  };
  static Buffers plan(Arena& arena, const CpAttentionSpec& spec);

  RingAttention(Comm cp, const CpAttentionSpec& spec, const Buffers& buffers);

  void forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) override;  // lse (B, H, Tl)
  void backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) override;

 private:
  void use_documents(const int32_t* starts) override;
  // The first visible rows of rank j's block for each local query row, (B, Tl); empty without documents.
  Tensor first_keys(int j);
  int next() const { return (split_.rank + 1) % split_.cp; }
  int prev() const { return (split_.rank + split_.cp - 1) % split_.cp; }

  Buffers buf_;
  std::vector<int32_t> first_;  // cp × (B, Tl) while documents are in use, else empty
};

}  // namespace megatrain
