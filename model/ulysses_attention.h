// Context parallelism by all-to-all (parallel.cp_comm = "all_to_all", DeepSpeed-Ulysses;
// model/attention_core.h): q, k and v are redistributed so each rank holds n_heads / cp query heads
// (n_kv_heads / cp key/value heads) of the whole sequence in order, runs the ordinary causal
// attention there, and the output comes back by the inverse exchange. Needs cp to divide the rank's
// query and key/value heads (config/config_validate.cpp refuses it otherwise).
#pragma once
#include <span>
#include <vector>

#include "model/cp_attention.h"

namespace megatrain {

class UlyssesAttention final : public CpAttention {
 public:
  // The exchange buffers and the whole-sequence q/k/v, output and their gradients.
  struct Buffers {
    Tensor send, recv, full_qkv, full_att, full_dout, full_dqkv;
  };
  static Buffers plan(Arena& arena, const CpAttentionSpec& spec);

  UlyssesAttention(Comm cp, const CpAttentionSpec& spec, const Buffers& buffers);

  // lse (B, H/cp, T): this rank's heads over the whole sequence, what its backward reads.
  void forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) override;
  void backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) override;

 private:
  // The whole sequences are in order here: a row's first visible key is its document's first position.
  void use_documents(const int32_t* starts) override;
  // The columns rank p's heads occupy in a local tensor: first + p·width, width wide.
  struct ColGroup {
    int64_t first, width;
  };
  std::vector<ColGroup> qkv_groups() const;
  // to_full, local (B, Tl, ·) → full (B, T, Σ width), this rank's heads of every rank's rows placed
  // at their positions; else the inverse, full → local.
  void exchange(const Stream& s, Tensor local, std::span<const ColGroup> groups, Tensor full, bool to_full);

  Buffers buf_;
  Tensor first_key_;  // (B, T) of whole sequences, or empty
};

}  // namespace megatrain
