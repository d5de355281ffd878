#include "model/norm.h"

namespace megatrain {

NormActivations norm_activations(Arena& arena, const ModelConfig& cfg, int64_t N, DType out) {
  NormActivations a;
  a.out = arena.tensor(Shape{N, cfg.d_model}, out);
  if (cfg.norm == NormKind::layernorm) a.mean = arena.tensor(Shape{N});
  a.rstd = arena.tensor(Shape{N});
  return a;
}

void norm_forward(const Stream& s, const ModelConfig& cfg, NormActivations& act, Tensor inp, const NormWeights& w) {
  if (cfg.norm == NormKind::layernorm)
    layernorm_forward(s, act.out, act.mean, act.rstd, inp, w.weight, w.bias, cfg.norm_eps);
  else
    rmsnorm_forward(s, act.out, act.rstd, inp, w.weight, cfg.norm_eps);
}

void norm_backward(const Stream& s, const ModelConfig& cfg, Tensor dinp, const NormWeights& grad, Tensor dout,
                   Tensor dresidual, const NormActivations& act, Tensor inp, const NormWeights& w) {
  if (cfg.norm == NormKind::layernorm)
    layernorm_backward(s, dinp, grad.weight, grad.bias, dout, dresidual, inp, w.weight, act.mean, act.rstd);
  else
    rmsnorm_backward(s, dinp, grad.weight, dout, dresidual, inp, w.weight, act.rstd);
}

}  // namespace megatrain
