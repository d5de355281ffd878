// The input layer of the first stage: vocabulary-parallel token embedding (each tp rank looks up
// the ids in its vocabulary rows; the partial sums leave the tp region — all-reduced, or
// reduce-scattered to sequence shards), the learned position embedding of GPT-2 at this rank's
// rows, then dropout (stream 0 of the site, keyed like the blocks').
#pragma once
#include "model/positions.h"
#include "model/sublayer.h"

namespace megatrain {

struct EmbeddingWeights {
  Tensor wte;  // (Vl, C) this rank's vocabulary rows
  Tensor wpe;  // (max_seq_len, C), empty with RoPE
};

// out: (Nl, C), this rank's rows of the stage's sequences, which `positions` places (with sequence
// parallelism from tp.first_row() on); partial: (N, C) scratch for the partial sums with sequence
// parallelism.
void embedding_layer_forward(const Stream& s, const TensorParallel& tp, const LocalDims& local, Tensor out,
                             Tensor partial, Tensor tokens, const EmbeddingWeights& w, const RowPositions& positions,
                             const DropoutSite& drop);
// dout: (Nl, C), overwritten (masked by the dropout); `+=` into grad.
void embedding_layer_backward(const Stream& s, const TensorParallel& tp, const LocalDims& local,
                              const EmbeddingWeights& grad, Tensor dout, Tensor partial, Tensor tokens,
                              const RowPositions& positions, const DropoutSite& drop);

}  // namespace megatrain
