// What the CPU and CUDA kernels of block attention share (kernels/ops.h attention_block_forward):
// an operand as rows of a (B, T, ·) tensor, and the block's sizes. Plain C++, no CUDA headers.
#pragma once
#include <cstdint>

namespace megatrain {

// One operand of a block of attention: token t of sequence b, head h at data + b·seq + t·ld + h·D.
template <typename F>
struct AttnView {
  F* data;
  int64_t ld, seq;
};
// Tq query rows against Tk key rows of each of B sequences; causal (Tq == Tk): key j is hidden from
// query i when j > i, else every key is seen. lse element (b, h, t) at lse[(b·H + h)·lse_ld + t].
struct AttnBlock {
  int B, Tq, Tk, H, Hkv, D;
  bool causal;
  int64_t lse_ld;
};

}  // namespace megatrain
