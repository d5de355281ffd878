// Tensor-parallel linear layers (Megatron-LM's ColumnParallelLinear and RowParallelLinear) as
// forward/backward pairs over the mappings of parallel/mappings.h. Weights are (OC, C) as PyTorch.
//
// Column-parallel: this rank holds rows W_r (its output features: heads, MLP units, vocabulary
// rows); Y_r = X·W_rᵀ + b_r on the input X entered into the tp region. Backward reduces the input
// gradient Σ_r dY_r·W_r over tp and, with TpOptions::overlap, computes dW_r = dY_rᵀ·X meanwhile.
// Row-parallel: this rank holds columns W_r, reads its slice X_r of the input features and produces
// a partial Y; leaving the region sums the partials over tp. The (replicated) bias is added once,
// by tp rank 0 before the sum, so every element of Y has it exactly once.
//
// An empty dweight leaves the weight (and bias) gradient to a later linear_weight_backward() on the
// same output gradient and input: the split backward of zero-bubble pipelines (model/stage.h).
#pragma once
#include "kernels/ops.h"
#include "parallel/mappings.h"

namespace megatrain {

void column_parallel_forward(const Stream& s, Tensor out,  // (N, OC_r)
                             Tensor inp,                   // (N, C) entered (full rows)
                             Tensor weight, Tensor bias);  // (OC_r, C), (OC_r) or empty
// dinp_full: (N, C) scratch that receives this rank's input gradient (it is dinp itself without
// sequence parallelism); dinp: (local_rows, C), = the sum over tp.
void column_parallel_backward(const Stream& s, const TensorParallel& tp, Tensor dinp, Tensor dinp_full,
                              Tensor dweight, Tensor dbias,  // (OC_r, C) +=, (OC_r) += or empty
                              Tensor dout,                   // (N, OC_r)
                              Tensor inp, Tensor weight);    // (N, C), (OC_r, C)

// partial: (N, OC) scratch for this rank's partial sum (it is out itself without sequence
// parallelism); out: (local_rows, OC).
void row_parallel_forward(const Stream& s, const TensorParallel& tp, Tensor out, Tensor partial,
                          Tensor inp,                   // (N, C_r)
                          Tensor weight, Tensor bias);  // (OC, C_r), (OC) or empty
// dout: (local_rows, OC); dout_full: (N, OC) scratch for the gathered gradient (dout itself without
// sequence parallelism). The bias gradient comes from all N rows, equal on every tp rank.
void row_parallel_backward(const Stream& s, const TensorParallel& tp, Tensor dinp,  // (N, C_r) =
                           Tensor dweight, Tensor dbias,  // (OC, C_r) +=, (OC) += or empty
                           Tensor dout_full, Tensor dout, Tensor inp, Tensor weight);

// dweight += doutᵀ·inp, dbias += Σ rows of dout (dbias may be empty): the deferred half of a
// backward above, dout and inp as it had them (full rows).
void linear_weight_backward(const Stream& s, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp);

}  // namespace megatrain
