#include "model/mlp.h"

#include "model/linear.h"

namespace megatrain {

MlpActivations mlp_activations(Arena& arena, const ModelConfig& cfg, const TensorParallel& tp, int64_t rows) {
  const LocalDims L = local_of(cfg, tp);
  const int64_t fc = cfg.activation == ActivationKind::swiglu ? 2 * L.ffn : L.ffn;
  MlpActivations a;
  a.norm = norm_activations(arena, cfg, tp.local_rows());
  a.fc = arena.tensor(Shape{rows, fc});
  a.act = arena.tensor(Shape{rows, L.ffn});
  return a;
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
                           Tensor x_mid, const MlpWeights& w, const DropoutSite& drop) {
  const Tensor dproj = through_dropout(s, dout, sc.proj, drop, kSiteMlp);
  row_parallel_backward(s, tp, sc.dact, grad.proj_w, grad.proj_b, full_rows(tp, dproj, sc.partial), dproj, a.act,
                        w.proj_w);
  if (cfg.activation == ActivationKind::gelu)
    gelu_backward(s, sc.dfc, sc.dact, a.fc);
  else
    swiglu_backward(s, sc.dfc, sc.dact, a.fc);
  column_parallel_backward(s, tp, sc.dnorm, full_rows(tp, sc.dnorm, sc.dfull), grad.fc_w, grad.fc_b, sc.dfc,
                           enter_region(tp, a.norm, sc.gathered), w.fc_w);
  norm_backward(s, cfg, dmid, grad.norm, sc.dnorm, dout, a.norm, x_mid, w.norm);
}

}  // namespace megatrain
