#include "model/loss.h"

namespace megatrain {

void vocab_parallel_cross_entropy(const Stream& s, const TensorParallel& tp, const LocalDims& local, Tensor losses,
                                  Tensor logits, Tensor row_max, Tensor sums, Tensor targets, LossGrad grad,
                                  float dlogits_scale) {
  const int64_t N = losses.numel();
  const Tensor sum_exp = sums.part(0, Shape{N}), target_logit = sums.part(N, Shape{N});
  cross_entropy_max(s, row_max, logits, local.vocab_valid);
  if (tp.size() > 1) tp.comm().all_reduce(row_max.f32(), N, ReduceOp::max).wait();
  cross_entropy_sums(s, sum_exp, target_logit, logits, row_max, targets, local.vocab_begin, local.vocab_valid, grad);
  if (tp.size() > 1) tp.comm().all_reduce(sums.f32(), 2 * N).wait();
  cross_entropy_finish(s, losses, logits, row_max, sum_exp, target_logit, targets, local.vocab_begin,
                       local.vocab_valid, grad, dlogits_scale);
}

}  // namespace megatrain
