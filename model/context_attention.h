// The attention core under context parallelism (parallel.cp > 1): each rank of a cp group holds
// 1/cp of every sequence (parallel/context_parallel.h, the balanced split), and this computes the
// causal attention of its rows over the whole sequence, forward and backward, with the result of
// one process (within float32 summation order).
//
// ring (p2p): the key/value heads of each rank's rows travel once around the ring (GQA: only the
// n_kv_heads). At step i rank r holds the block of rank j = r − i (mod cp) and attends to it while
// the block is already being sent on and the next received (the sends overlap the block's
// attention). Which pairs see each other follows from the split (chunks r, 2cp−1−r against j,
// 2cp−1−j): step 0 is the rank's own rows with the causal mask; for j < r every local query sees
// the block's first chunk and not its second; for j > r only the second local chunk sees anything,
// and it sees the whole block. Each step's output and log-sum-exp are merged into the running ones
// (attention_merge). Backward passes the blocks around again, each with the gradient of its keys
// and values: rank r adds its contribution to block j's dK/dV and sends the sum on, so after cp
// steps every block's gradient returns to its owner.
//
// all_to_all (DeepSpeed-Ulysses): q, k and v are redistributed so each rank holds n_heads / cp
// query heads (n_kv_heads / cp key/value heads) of the whole sequence in order, runs the ordinary
// causal attention there, and the output comes back by the inverse exchange.
//
// The group's communicator counts the time its messages were in flight and the time the attention
// waited for them (CommStats busy_ms, exposed_ms: the step's cp_comm_ms and cp_exposed_ms). Needs cp to divide the
// rank's query and key/value heads (config/config_validate.cpp refuses it otherwise).
#pragma once
#include <optional>
#include <span>
#include <vector>

#include "kernels/ops.h"
#include "parallel/comm.h"
#include "parallel/context_parallel.h"

namespace megatrain {

class ContextAttention {
 public:
  // `cp`: the group (nullopt only for planning: measure_only stages never run); heads: this rank's
  // (tensor-parallel) share; B sequences of split.local_len() rows.
  ContextAttention(std::optional<Comm> cp, CpComm algo, const CpSplit& split, int B, AttnHeads heads);

  // The buffers of one stage's blocks (shared by them: one block's core runs at a time).
  void plan(Arena& arena);
  const CpSplit& split() const { return split_; }
  const Comm* comm() const { return comm_ ? &*comm_ : nullptr; }
  CpComm algorithm() const { return algo_; }

  // att (B·Tl, H·D) and lse of the local rows — lse (B, H, Tl) for ring, (B, H/cp, T) for
  // all_to_all (this rank's heads over the whole sequence, what its backward reads) — from qkv
  // (B, Tl, (H + 2·Hkv)·D).
  void forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv);
  // dqkv ← the gradient of qkv from datt, with forward's att and lse.
  void backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse);
  // RoPE on the local rows at their positions in the sequence (forward or its inverse).
  void rope(const Stream& s, Tensor qkv, float theta, RopeDirection dir) const;

 private:
  void ring_forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv);
  void ring_backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse);
  void a2a_forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv);
  void a2a_backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse);
  // The columns rank p's heads occupy in a local tensor: first + p·width, width wide.
  struct ColGroup {
    int64_t first, width;
  };
  std::vector<ColGroup> qkv_groups() const;
  // all_to_all: to_full, local (B, Tl, ·) → full (B, T, Σ width), this rank's heads of every rank's
  // rows placed at their positions; else the inverse, full → local.
  void exchange(const Stream& s, Tensor local, std::span<const ColGroup> groups, Tensor full, bool to_full);
  // The ring's neighbours.
  int next() const { return (split_.rank + 1) % split_.cp; }
  int prev() const { return (split_.rank + split_.cp - 1) % split_.cp; }

  std::optional<Comm> comm_;
  CpComm algo_;
  CpSplit split_;
  int B_;
  AttnHeads heads_;
  // ring: key/value blocks in flight, their gradients, one block's output and lse.
  Tensor kv_[2], dkv_[2], dkv_in_, part_, part_lse_;
  // all_to_all: the exchange buffers and the whole-sequence q/k/v, output and their gradients.
  Tensor send_, recv_, full_qkv_, full_att_, full_dout_, full_dqkv_;
};

}  // namespace megatrain
