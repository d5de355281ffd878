#include "model/embedding.h"

namespace megatrain {

void embedding_layer_forward(const Stream& s, const TensorParallel& tp, const LocalDims& local, Tensor out,
                             Tensor partial, Tensor tokens, const EmbeddingWeights& w, int T, const DropoutSite& drop) {
  const Tensor emb = full_rows(tp, out, partial);
  embedding_forward(s, emb, tokens, w.wte, local.vocab_begin);
  tp.leave_forward(out, emb);
  if (w.wpe.data) position_embedding_forward(s, out, w.wpe, T, tp.first_row());
  apply_dropout(s, out, drop, 0);
}

void embedding_layer_backward(const Stream& s, const TensorParallel& tp, const LocalDims& local,
                              const EmbeddingWeights& grad, Tensor dout, Tensor partial, Tensor tokens, int T,
                              const DropoutSite& drop) {
  apply_dropout(s, dout, drop, 0);
  if (grad.wpe.data) position_embedding_backward(s, grad.wpe, dout, T, tp.first_row());
  const Tensor demb = full_rows(tp, dout, partial);
  tp.leave_backward(demb, dout);
  embedding_backward(s, grad.wte, demb, tokens, local.vocab_begin);
}

}  // namespace megatrain
