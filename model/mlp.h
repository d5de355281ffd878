// The MLP sublayer of a pre-norm block, tensor-parallel (Megatron-LM's layout):
//   y = x_mid + Dropout(Proj(Act(FC(Norm(x_mid)))))
// FC is column-parallel (this rank's units; [gate_r | up_r] for SwiGLU), Proj row-parallel. The
// KV-cached decoder (model/kv_cache.h) runs this same forward on its rows.
#pragma once
#include "model/sublayer.h"

namespace megatrain {

struct MlpWeights {
  NormWeights norm;
  Tensor fc_w, fc_b, proj_w, proj_b;  // biases empty when bias = false
};

// norm.out, fc and act in the activations' dtype `act` (f32 | bf16, model/stage.h).
struct MlpActivations {
  NormActivations norm;  // (Nl, C); with SP entered into the tp region in BlockScratch::gathered
  Tensor fc;             // (N, Fl) or (N, 2·Fl) for SwiGLU
  Tensor act;            // (N, Fl)
};
MlpActivations mlp_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int64_t rows,
                               DType act = DType::f32);
WeightGradInputs mlp_weight_grad_inputs(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int64_t rows,
                                        DType act = DType::f32);

void mlp_sublayer_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor out,
                          MlpActivations& a, BlockScratch& sc, Tensor x_mid, const MlpWeights& w,
                          const DropoutSite& drop);
// dmid = gradient at x_mid (residual included), from dout; `+=` into grad — but for the two
// projections' weights and biases when `defer` is given (kept for mlp_weight_backward()).
void mlp_sublayer_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dmid,
                           const MlpWeights& grad, Tensor dout, const MlpActivations& a, BlockScratch& sc,
                           Tensor x_mid, const MlpWeights& w, const DropoutSite& drop,
                           const WeightGradInputs& defer = {});
void mlp_weight_backward(const Stream& s, const TensorParallel& tp, const MlpWeights& grad, const MlpActivations& a,
                         BlockScratch& sc, const WeightGradInputs& defer);

}  // namespace megatrain
