#include "model/local_attention.h"

namespace megatrain {

LocalAttention::LocalAttention(int B, int T, AttnHeads heads)
    : B_(B), T_(T), positions_(RowPositions::identity(B, T)), heads_(heads) {}

// A query row's first visible key is its document's first position: the rows are the sequences.
void LocalAttention::use_documents(const int32_t* starts) {
  first_key_ = starts ? Tensor(const_cast<int32_t*>(starts), Shape{B_, T_}) : Tensor{};
}

void LocalAttention::forward(const Stream& s, Tensor att, Tensor lse, Tensor qkv) {
  attention_forward(s, att, lse, qkv, heads_.n_heads, heads_.n_kv_heads, first_key_);
}

void LocalAttention::backward(const Stream& s, Tensor dqkv, Tensor datt, Tensor qkv, Tensor att, Tensor lse) {
  attention_backward(s, dqkv, datt, qkv, att, lse, heads_.n_heads, heads_.n_kv_heads, first_key_);
}

}  // namespace megatrain
