// Model FLOPs: the one definition that MFU (trainer/step_log.h), the planner's predicted MFU
// (planner/plan_cost.h), its device profile and the throughput benchmark divide by (README "MFU").
// [Note: model FLOPs] 2 FLOPs per multiply-add forward and 4 backward (data and weight gradients)
// for every weight matrix a token passes through — the attention projections, the MLP or, in an
// MoE block, the top_k routed experts' and the shared experts' matrices and the router (and the
// dense branch of a residual MoE), and the LM head; attention's two products 4·T·H·D per token and
// layer forward, halved for the causal mask, tripled for forward + backward. Embedding lookups,
// norms, activations, the softmax and the MoE dispatch are not counted. As Megatron's MFU counts:
// activation recompute is not counted (it is hardware FLOPs, not model FLOPs), and context
// parallelism changes nothing (its ranks split the same work).
#pragma once

#include "model/config.h"

namespace megatrain {

// Forward FLOPs per token of block `layer`'s matrix multiplies and attention (a third of training's).
double block_forward_flops(const ModelConfig& m, int layer, int seq_len);
// Model FLOPs per trained token, forward + backward: 3 × (every block's forward + the LM head's,
// over the unsplit padded vocabulary).
double model_flops_per_token(const ModelConfig& m, int seq_len);

}  // namespace megatrain
