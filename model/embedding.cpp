#include "model/embedding.h"

namespace megatrain {
namespace {

// The learned positions of the rank's rows `x` (Nl, C) (`dx` of the table in backward).
void positions(const Stream& s, const TensorParallel& tp, Tensor x, Tensor wpe, int T, const CpSplit* split,
               bool backward) {
  if (!split) {
    if (backward) return position_embedding_backward(s, wpe, x, T, tp.first_row());
    return position_embedding_forward(s, x, wpe, T, tp.first_row());
  }
  const int64_t C = x.shape[1];
  for_each_position_run(*split, tp.first_row(), x.shape[0], [&](int64_t first, int64_t n, int position) {
    const Tensor rows = x.part(first * C, Shape{n, C});
    if (backward) return position_embedding_backward(s, wpe, rows, split->seq_len, position);
    position_embedding_forward(s, rows, wpe, split->seq_len, position);
  });
}

}  // namespace

void embedding_layer_forward(const Stream& s, const TensorParallel& tp, const LocalDims& local, Tensor out,
                             Tensor partial, Tensor tokens, const EmbeddingWeights& w, int T, const DropoutSite& drop,
                             const CpSplit* split) {
  const Tensor emb = full_rows(tp, out, partial);
  embedding_forward(s, emb, tokens, w.wte, local.vocab_begin);
  tp.leave_forward(out, emb);
  if (w.wpe.data) positions(s, tp, out, w.wpe, T, split, false);
  apply_dropout(s, out, drop, 0);
}

void embedding_layer_backward(const Stream& s, const TensorParallel& tp, const LocalDims& local,
                              const EmbeddingWeights& grad, Tensor dout, Tensor partial, Tensor tokens, int T,
                              const DropoutSite& drop, const CpSplit* split) {
  apply_dropout(s, dout, drop, 0);
  if (grad.wpe.data) positions(s, tp, dout, grad.wpe, T, split, true);
  const Tensor demb = full_rows(tp, dout, partial);
  tp.leave_backward(demb, dout);
  embedding_backward(s, grad.wte, demb, tokens, local.vocab_begin);
}

}  // namespace megatrain
