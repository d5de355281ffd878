// One pre-norm transformer block as a forward/backward pair, tensor-parallel (Megatron-LM's layout):
//   x_mid = x + Dropout(Attn(Norm₁(x)));   y = x_mid + Dropout(MLP(Norm₂(x_mid)))
// Attention is column-parallel QKV (this rank's heads), attention over them, row-parallel output;
// the MLP is column-parallel fc ([gate_r | up_r] for SwiGLU), row-parallel proj. Norms, dropout and
// residuals run on the rows outside the tp regions: all N, or N/tp with sequence parallelism.
// Forward saves exactly what backward needs (BlockActivations); backward `+=` into the parameter
// gradients and `=` into dinp.
#pragma once
#include "kernels/ops.h"
#include "model/config.h"
#include "model/norm.h"
#include "model/params.h"
#include "parallel/mappings.h"

namespace megatrain {

struct BlockWeights {
  NormWeights attn_norm, mlp_norm;
  Tensor qkv_w, qkv_b, proj_w, proj_b, fc_w, fc_b, fc2_w, fc2_b;  // biases empty when bias = false
};

// Where block l's tensors are in a ParamLayout (looked up once; kAbsent for a missing bias).
struct BlockParamIndex {
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  size_t attn_norm_w, attn_norm_b, qkv_w, qkv_b, proj_w, proj_b, mlp_norm_w, mlp_norm_b, fc_w, fc_b, fc2_w, fc2_b;
};
BlockParamIndex block_param_index(const ParamLayout& layout, int layer);
// Views of a block's tensors in a buffer holding the flat range from `data_begin` on
// (data[j] = flat element data_begin + j of the layout). Allocates nothing.
BlockWeights block_weights(const ParamLayout& layout, const BlockParamIndex& index, float* data, int64_t data_begin);

struct BlockActivations {
  NormActivations attn_norm;  // (Nl, C); with SP the block enters all N rows into the tp region in
                              // BlockScratch::gathered, and gathers them again in backward (not saved)
  Tensor qkv;                 // (B, T, (Hl + 2·Hkvl)·D), after RoPE
  Tensor att;                 // (N, Hl·D)
  Tensor lse;                 // (B, Hl, T)
  Tensor x_mid;               // (Nl, C)
  NormActivations mlp_norm;   // (Nl, C), entered like attn_norm
  Tensor fc;                  // (N, Fl) or (N, 2·Fl) for SwiGLU
  Tensor act;                 // (N, Fl)
};
// Sizes: micro-batch B × T = N rows, this rank's share of heads and MLP units (local_dims).
BlockActivations block_activations(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B, int T);

// Buffers reused by every block of a micro-batch step (not saved).
struct BlockScratch {
  Tensor proj;     // (Nl, C)  projection outputs / dropout-masked gradients
  Tensor partial;  // (N, C)   row-parallel partial sums, gathered gradients (= proj without SP)
  Tensor dfull;    // (N, C)   input gradient of a column-parallel layer before its reduction (SP only)
  Tensor gathered; // (N, C)   a norm output gathered from the sequence shards (SP only)
  Tensor dnorm;    // (Nl, C)  gradient at a norm output
  Tensor dmid;     // (Nl, C)  gradient at x_mid
  Tensor datt;     // (N, Hl·D)
  Tensor dqkv;     // like qkv
  Tensor dfc;      // like fc
  Tensor dact;     // (N, Fl)
};
BlockScratch block_scratch(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int B, int T);

// Dropout randomness of one block application: element e of site k's (Nl, C) rows uses
// RngKey{seed, dropout, stream_base + k, offset + e}; `offset` includes this rank's first row, so
// the masks equal the single process's. Probability 0 disables it.
struct DropoutSite {
  float p = 0.0f;
  uint64_t seed = 0;
  uint32_t stream_base = 0;
  uint64_t offset = 0;
};

void block_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor out,
                   BlockActivations& a, BlockScratch& sc, Tensor inp, const BlockWeights& w, const DropoutSite& drop);
void block_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dinp,
                    const BlockWeights& grad, Tensor dout, const BlockActivations& a, BlockScratch& sc, Tensor inp,
                    const BlockWeights& w, const DropoutSite& drop);

}  // namespace megatrain
