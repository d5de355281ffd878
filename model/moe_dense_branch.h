// The dense MLP beside the experts of an MoE block (model/moe.h), in one of two roles:
//   shared experts (moe.n_shared_experts = S, DeepSeek-MoE): an always-on MLP of S·Fe units whose
//     output is added to the experts': y = Shared(x) + Σ_j g_j·E_j(x);
//   residual MoE (moe.residual, DeepSpeed PR-MoE): an MLP of Fe units mixed with the experts' output
//     by a learned per-token coefficient: (c₀, c₁) = softmax(x·W_cᵀ), y = c₀·MLP(x) + c₁·Σ_j g_j·E_j(x)
//     (W_c: (2, C), no bias).
// x is the block's normed input in the tp region (full rows). The MLP is tensor-parallel as the
// dense MLP (FC column-parallel with [gate | up] for SwiGLU, projection row-parallel, no biases), so
// its output is a partial sum over tp, like the experts' — the mixing is linear in both, so the
// sublayer's one reduction over tp comes after it. The coefficients' gradient needs whole outputs
// and is summed over tp, as the gates'.
#pragma once
#include "model/sublayer.h"

namespace megatrain {

struct DenseBranchWeights {
  Tensor fc;    // (Fl or 2·Fl, C)
  Tensor proj;  // (C, Fl)
  Tensor coef;  // (2, C), residual MoE only
};

struct DenseBranchActivations {
  Tensor fc, act;      // (N, Fl or 2·Fl), (N, Fl)
  Tensor out;          // (N, C) the MLP's partial output
  Tensor moe;          // (N, C) the experts' partial output (residual MoE only)
  Tensor coef;         // (N, 2) mixing coefficients (residual MoE only)
};

struct DenseBranchScratch {
  Tensor dfc, dact;  // like fc and act
  Tensor dx;         // (N, C): an input gradient before it is added
  Tensor dcoef;      // (N, 2)
};

DenseBranchActivations dense_branch_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp,
                                                int64_t rows);
DenseBranchScratch dense_branch_scratch(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int64_t rows);

// partial (N, C) holds the experts' combined partial output; it becomes the sublayer's partial output.
void dense_branch_forward(const Stream& s, const ModelConfig& cfg, Tensor partial, DenseBranchActivations& a,
                          Tensor x, const DenseBranchWeights& w);
// dy (N, C): the gradient of the sublayer's output (full rows); dy_moe receives that of the experts'
// combined output (dy itself for shared experts, c₁·dy for residual MoE). `+=` into grad and into
// dx_full (this rank's partial input gradient; the coefficients' part counted by tp rank 0 only).
void dense_branch_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dx_full,
                           Tensor dy_moe, const DenseBranchWeights& grad, Tensor dy, const DenseBranchActivations& a,
                           DenseBranchScratch& sc, Tensor x, const DenseBranchWeights& w);

}  // namespace megatrain
