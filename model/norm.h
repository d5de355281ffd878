// A normalisation layer (LayerNorm or RMSNorm, chosen by ModelConfig::norm) as one
// forward/backward pair with its saved statistics.
#pragma once
#include "kernels/ops.h"
#include "model/config.h"

namespace megatrain {

struct NormWeights {
  Tensor weight, bias;  // bias empty for RMSNorm or bias = false
};

struct NormActivations {
  Tensor out;   // (N, C), f32 | bf16 (kernels/ops.h [Note: bf16 activations])
  Tensor mean;  // (N), LayerNorm only
  Tensor rstd;  // (N)
};

NormActivations norm_activations(Arena& arena, const ModelConfig& cfg, int64_t N, DType out = DType::f32);

void norm_forward(const Stream& s, const ModelConfig& cfg, NormActivations& act, Tensor inp, const NormWeights& w);
// dinp = dresidual + ∂/∂inp (dresidual may be empty).
void norm_backward(const Stream& s, const ModelConfig& cfg, Tensor dinp, const NormWeights& grad, Tensor dout,
                   Tensor dresidual, const NormActivations& act, Tensor inp, const NormWeights& w);

}  // namespace megatrain
