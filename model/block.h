// One pre-norm transformer block as a forward/backward pair:
//   x_mid = x + Dropout(Attn(Norm₁(x)));   y = x_mid + Dropout(MLP(Norm₂(x_mid)))
// Forward saves exactly what backward needs (BlockActivations); backward `+=` into the
// parameter gradients and `=` into dinp.
#pragma once
#include "kernels/ops.h"
#include "model/config.h"
#include "model/norm.h"
#include "model/params.h"

namespace megatrain {

struct BlockWeights {
  NormWeights attn_norm, mlp_norm;
  Tensor qkv_w, qkv_b, proj_w, proj_b, fc_w, fc_b, fc2_w, fc2_b;  // biases empty when bias = false
};
// Views of layer `layer`'s tensors in a buffer holding the flat range from `data_begin` on
// (data[j] = flat element data_begin + j of the layout).
BlockWeights block_weights(const ParamLayout& layout, float* data, int64_t data_begin, int layer);

struct BlockActivations {
  NormActivations attn_norm;  // (N, C)
  Tensor qkv;                 // (B, T, (H + 2·Hkv)·D), after RoPE
  Tensor att;                 // (N, H·D)
  Tensor lse;                 // (B, H, T)
  Tensor x_mid;               // (N, C)
  NormActivations mlp_norm;   // (N, C)
  Tensor fc;                  // (N, F) or (N, 2F) for SwiGLU
  Tensor act;                 // (N, F)
};
BlockActivations block_activations(Arena& arena, const ModelConfig& cfg, int B, int T);

// Buffers reused by every block of a micro-batch step (not saved).
struct BlockScratch {
  Tensor proj;  // (N, C)    projection outputs / dropout-masked gradients
  Tensor dnorm; // (N, C)    gradient at a norm output
  Tensor dmid;  // (N, C)    gradient at x_mid
  Tensor datt;  // (N, H·D)
  Tensor dqkv;  // (B, T, (H + 2·Hkv)·D)
  Tensor dfc;   // like fc
  Tensor dact;  // (N, F)
};
BlockScratch block_scratch(Arena& arena, const ModelConfig& cfg, int B, int T);

// Dropout randomness of one block application: element e of site k uses
// RngKey{seed, dropout, stream_base + k, offset}. Probability 0 disables it.
struct DropoutSite {
  float p = 0.0f;
  uint64_t seed = 0;
  uint32_t stream_base = 0;
  uint64_t offset = 0;
};

void block_forward(const Stream& s, const ModelConfig& cfg, Tensor out, BlockActivations& a, BlockScratch& sc,
                   Tensor inp, const BlockWeights& w, const DropoutSite& drop);
void block_backward(const Stream& s, const ModelConfig& cfg, Tensor dinp, const BlockWeights& grad, Tensor dout,
                    const BlockActivations& a, BlockScratch& sc, Tensor inp, const BlockWeights& w,
                    const DropoutSite& drop);

}  // namespace megatrain
