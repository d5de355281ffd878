// Vocabulary-parallel cross-entropy (Megatron-LM's): each tp rank holds the logits of its
// vocabulary rows only; the row maxima are max-reduced and the exp-sums and target logits
// sum-reduced over tp (two all-reduces of N and 2·N floats), so the full (N, V) logits are never
// gathered. Every rank ends with all N token losses, and with LossGrad::in_place the gradient of
// its own logits, (softmax − onehot) · dlogits_scale, written over them (padding columns 0).
#pragma once
#include "kernels/ops.h"
#include "model/params.h"
#include "parallel/mappings.h"

namespace megatrain {

void vocab_parallel_cross_entropy(const Stream& s, const TensorParallel& tp, const LocalDims& local,
                                  Tensor losses,   // (N)
                                  Tensor logits,   // (N, local.vocab) → dlogits if in_place
                                  Tensor row_max,  // (N) scratch
                                  Tensor sums,     // (2, N) scratch
                                  Tensor targets,  // (N) i32, global ids
                                  LossGrad grad, float dlogits_scale);

}  // namespace megatrain
