// What the CPU and CUDA kernels of block attention share (kernels/ops.h attention_block_forward):
// an operand as rows of a (B, T, ·) tensor, the views of the packed operands, and the block's
// sizes. Plain C++, no CUDA headers (kernels/host_device.h).
#pragma once
#include <cstdint>

#include "kernels/host_device.h"

namespace megatrain {

// One operand of a block of attention: token t of sequence b, head h at data + b·seq + t·ld + h·D.
template <typename F>
struct AttnView {
  F* data;
  int64_t ld, seq;
  MT_HOST_DEVICE F* at(int b, int t, int h, int D) const {
    return data + b * seq + static_cast<int64_t>(t) * ld + static_cast<int64_t>(h) * D;
  }
};
// The packed (B, T, (H + 2·Hkv)·D) qkv operand's heads from `first_head` on (0: q, H: k, H + Hkv: v),
// and the (B, T, H·D) output's.
template <typename F>
AttnView<F> packed_heads(F* qkv, int T, int H, int Hkv, int D, int first_head) {
  const int64_t row = static_cast<int64_t>(H + 2 * Hkv) * D;
  return {qkv + static_cast<int64_t>(first_head) * D, row, row * T};
}
template <typename F>
AttnView<F> output_rows(F* out, int T, int H, int D) {
  const int64_t row = static_cast<int64_t>(H) * D;
  return {out, row, row * T};
}
// Tq query rows against Tk key rows of each of B sequences; causal (Tq == Tk): key j is hidden from
// query i when j > i, else every key is seen. lse element (b, h, t) at lse[(b·H + h)·lse_ld + t].
// Document boundaries: with first_key, key j is hidden from query i also when first_base + j <
// first_key[b·first_ld + i] (the first key of query i's document, numbered from first_base rows before
// the block's first key); a row may then see no key of the block (output 0, lse −∞).
struct AttnBlock {
  int B, Tq, Tk, H, Hkv, D;
  bool causal;
  int64_t lse_ld;
  const int32_t* first_key = nullptr;
  int64_t first_ld = 0;
  int first_base = 0;
};

}  // namespace megatrain
