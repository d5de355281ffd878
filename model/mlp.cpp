#include "model/mlp.h"

#include "model/linear.h"

namespace megatrain {

MlpActivations mlp_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int64_t rows,
                               DType act) {
  const LocalDims L = local_of(cfg, tp);
  const int64_t fc = cfg.activation == ActivationKind::swiglu ? 2 * L.ffn : L.ffn;
  MlpActivations a;
  a.norm = norm_activations(arena, cfg, tp.local_rows(), act);
  a.fc = arena.tensor(Shape{rows, fc}, act);
  a.act = arena.tensor(Shape{rows, L.ffn}, act);
  return a;
}

WeightGradInputs mlp_weight_grad_inputs(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int64_t rows,
                                        DType act) {
  Arena shapes_only = Arena::measuring();
  const MlpActivations like = mlp_activations(shapes_only, cfg, tp, rows);
  return {arena.tensor(like.fc.shape, act), arena.tensor(Shape{rows, cfg.d_model})};
}

void mlp_sublayer_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor out,
                          MlpActivations& a, BlockScratch& sc, Tensor x_mid, const MlpWeights& w,
                          const DropoutSite& drop) {
  norm_forward(s, cfg, a.norm, x_mid, w.norm);
  column_parallel_forward(s, a.fc, enter_region(tp, a.norm, sc.gathered), w.fc_w, w.fc_b);
  if (cfg.activation == ActivationKind::gelu)
    gelu_forward(s, a.act, a.fc);
  else
    swiglu_forward(s, a.act, a.fc);
  row_parallel_forward(s, tp, sc.proj, sc.partial, a.act, w.proj_w, w.proj_b);
  apply_dropout(s, sc.proj, drop, kSiteMlp);
  add_forward(s, out, x_mid, sc.proj);
}

void mlp_sublayer_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dmid,
                           const MlpWeights& grad, Tensor dout, const MlpActivations& a, BlockScratch& sc,
                           Tensor x_mid, const MlpWeights& w, const DropoutSite& drop,
                           const WeightGradInputs& defer) {
  const bool now = !defer.deferred();
  const Tensor dproj = through_dropout(s, dout, sc.proj, drop, kSiteMlp);
  const Tensor dproj_full = full_rows(tp, dproj, sc.partial);
  row_parallel_backward(s, tp, sc.dact, now ? grad.proj_w : Tensor{}, grad.proj_b, dproj_full, dproj, a.act,
                        w.proj_w);
  if (!now) copy(s, defer.d_out_proj, dproj_full);
  if (cfg.activation == ActivationKind::gelu)
    gelu_backward(s, sc.dfc, sc.dact, a.fc);
  else
    swiglu_backward(s, sc.dfc, sc.dact, a.fc);
  column_parallel_backward(s, tp, sc.dnorm, full_rows(tp, sc.dnorm, sc.dfull), now ? grad.fc_w : Tensor{},
                           grad.fc_b, sc.dfc, enter_region(tp, a.norm, sc.gathered), w.fc_w);
  if (!now) copy(s, defer.d_in_proj, sc.dfc);
  norm_backward(s, cfg, dmid, grad.norm, sc.dnorm, dout, a.norm, x_mid, w.norm);
}

void mlp_weight_backward(const Stream& s, const TensorParallel& tp, const MlpWeights& grad, const MlpActivations& a,
                         BlockScratch& sc, const WeightGradInputs& defer) {
  linear_weight_backward(s, grad.proj_w, grad.proj_b, defer.d_out_proj, a.act);
  linear_weight_backward(s, grad.fc_w, grad.fc_b, defer.d_in_proj, enter_region(tp, a.norm, sc.gathered));
}

}  // namespace megatrain
