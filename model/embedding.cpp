#include "model/embedding.h"

namespace megatrain {
namespace {

// The learned positions of the rank's rows `x` (Nl, C) (`dx` of the table in backward).
void positions_of(const Stream& s, const TensorParallel& tp, Tensor x, Tensor wpe, const RowPositions& positions,
                  bool backward) {
  const int64_t C = x.shape[1];
  positions.for_each_run(tp.first_row(), x.shape[0], [&](int64_t first, int64_t n, int position) {
    const Tensor rows = x.part(first * C, Shape{n, C});
    if (backward) return position_embedding_backward(s, wpe, rows, positions.seq_len(), position);
    position_embedding_forward(s, rows, wpe, positions.seq_len(), position);
  });
}

}  // namespace

void embedding_layer_forward(const Stream& s, const TensorParallel& tp, const LocalDims& local, Tensor out,
                             Tensor partial, Tensor tokens, const EmbeddingWeights& w, const RowPositions& positions,
                             const DropoutSite& drop) {
  const Tensor emb = full_rows(tp, out, partial);
  embedding_forward(s, emb, tokens, w.wte, local.vocab_begin);
  tp.leave_forward(out, emb);
  if (w.wpe.data) positions_of(s, tp, out, w.wpe, positions, false);
  apply_dropout(s, out, drop, 0);
}

void embedding_layer_backward(const Stream& s, const TensorParallel& tp, const LocalDims& local,
                              const EmbeddingWeights& grad, Tensor dout, Tensor partial, Tensor tokens,
                              const RowPositions& positions, const DropoutSite& drop) {
  apply_dropout(s, dout, drop, 0);
  if (grad.wpe.data) positions_of(s, tp, dout, grad.wpe, positions, true);
  const Tensor demb = full_rows(tp, dout, partial);
  tp.leave_backward(demb, dout);
  embedding_backward(s, grad.wte, demb, tokens, local.vocab_begin);
}

}  // namespace megatrain
