#include "model/local_attention.h"

namespace megatrain {

LocalAttention::LocalAttention(int B, int T, AttnHeads heads)
    : positions_(RowPositions::identity(B, T)), heads_(heads) {}

void LocalAttention::forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) {
  attention_forward(s, att, lse, qkv, heads_.n_heads, heads_.n_kv_heads);
}

void LocalAttention::backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) {
  attention_backward(s, dqkv, datt, qkv, att, lse, heads_.n_heads, heads_.n_kv_heads);
}

}  // namespace megatrain
