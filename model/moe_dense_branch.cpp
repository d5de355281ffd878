#include "model/moe_dense_branch.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace megatrain {
namespace {

int64_t fc_rows(const ModelConfig& cfg, int64_t units) {
  return cfg.activation == ActivationKind::swiglu ? 2 * units : units;
}

int64_t local_units(const ModelConfig& cfg, const TpShape& tp) {
  return cfg.moe.dense_branch_units(cfg.expert_ffn_dim()) / tp.size();
}

}  // namespace

DenseBranchActivations dense_branch_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp,
                                                int64_t rows) {
  const int64_t F = local_units(cfg, tp), C = cfg.d_model;
  DenseBranchActivations a;
  a.fc = arena.tensor(Shape{rows, fc_rows(cfg, F)});
  a.act = arena.tensor(Shape{rows, F});
  a.out = arena.tensor(Shape{rows, C});
  if (cfg.moe.residual) {
    a.moe = arena.tensor(Shape{rows, C});
    a.coef = arena.tensor(Shape{rows, 2});
  }
  return a;
}

DenseBranchScratch dense_branch_scratch(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int64_t rows) {
  const int64_t F = local_units(cfg, tp);
  DenseBranchScratch sc;
  sc.dfc = arena.tensor(Shape{rows, fc_rows(cfg, F)});
  sc.dact = arena.tensor(Shape{rows, F});
  sc.dx = arena.tensor(Shape{rows, cfg.d_model});
  sc.dcoef = arena.tensor(Shape{rows, 2});
  return sc;
}

void dense_branch_forward(const Stream& s, const ModelConfig& cfg, Tensor partial, DenseBranchActivations& a,
                          Tensor x, const DenseBranchWeights& w) {
  const int64_t N = partial.shape[0], C = partial.shape[1];
  matmul_forward(s, a.fc, x, w.fc, Tensor{});
  if (cfg.activation == ActivationKind::gelu)
    gelu_forward(s, a.act, a.fc);
  else
    swiglu_forward(s, a.act, a.fc);
  matmul_forward(s, a.out, a.act, w.proj, Tensor{});
  float *y = partial.f32(), *out = a.out.f32();
  if (!cfg.moe.residual) {
    for (int64_t i = 0; i < N * C; ++i) y[i] += out[i];
    return;
  }
  // Residual MoE: the coefficients from the (full, replicated) input, then the mix.
  matmul_forward(s, a.coef, x, w.coef, Tensor{});
  std::memcpy(a.moe.f32(), y, sizeof(float) * static_cast<size_t>(N * C));
  float* c = a.coef.f32();
  for (int64_t t = 0; t < N; ++t) {
    const float m = std::max(c[2 * t], c[2 * t + 1]);
    const float e0 = std::exp(c[2 * t] - m), e1 = std::exp(c[2 * t + 1] - m);
    c[2 * t] = e0 / (e0 + e1);
    c[2 * t + 1] = e1 / (e0 + e1);
    for (int64_t j = t * C; j < (t + 1) * C; ++j) y[j] = c[2 * t] * out[j] + c[2 * t + 1] * y[j];
  }
}

void dense_branch_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, Tensor dx_full,
                           Tensor dy_moe, const DenseBranchWeights& grad, Tensor dy, const DenseBranchActivations& a,
                           DenseBranchScratch& sc, Tensor x, const DenseBranchWeights& w) {
  const int64_t N = dy.shape[0], C = dy.shape[1];
  const float* g = dy.f32();
  float* gm = dy_moe.f32();
  // The MLP's output gradient (into dy_moe for now: c₀·dy, or dy itself).
  Tensor dout = dy;
  if (cfg.moe.residual) {
    // ∂/∂c: ⟨dy, MLP out⟩ and ⟨dy, experts' out⟩ (partials: summed over tp), then through the softmax.
    const float *c = a.coef.f32(), *out = a.out.f32(), *moe = a.moe.f32();
    float* dc = sc.dcoef.f32();
    for (int64_t t = 0; t < N; ++t) {
      double d0 = 0.0, d1 = 0.0;
      for (int64_t j = t * C; j < (t + 1) * C; ++j) {
        d0 += static_cast<double>(g[j]) * out[j];
        d1 += static_cast<double>(g[j]) * moe[j];
      }
      dc[2 * t] = static_cast<float>(d0), dc[2 * t + 1] = static_cast<float>(d1);
    }
    if (tp.size() > 1) tp.comm().all_reduce(dc, 2 * N).wait();
    for (int64_t t = 0; t < N; ++t) {
      const float dot = c[2 * t] * dc[2 * t] + c[2 * t + 1] * dc[2 * t + 1];
      const float dz0 = c[2 * t] * (dc[2 * t] - dot), dz1 = c[2 * t + 1] * (dc[2 * t + 1] - dot);
      for (int64_t j = t * C; j < (t + 1) * C; ++j) gm[j] = c[2 * t] * g[j];  // the MLP's, for now
      dc[2 * t] = dz0, dc[2 * t + 1] = dz1;
    }
    dout = dy_moe;
  }
  matmul_backward(s, sc.dact, grad.proj, Tensor{}, dout, a.act, w.proj);
  if (cfg.activation == ActivationKind::gelu)
    gelu_backward(s, sc.dfc, sc.dact, a.fc);
  else
    swiglu_backward(s, sc.dfc, sc.dact, a.fc);
  matmul_backward(s, sc.dx, grad.fc, Tensor{}, sc.dfc, x, w.fc);
  float* dx = dx_full.f32();
  const float* from = sc.dx.f32();
  for (int64_t i = 0; i < N * C; ++i) dx[i] += from[i];
  if (!cfg.moe.residual) {
    std::memcpy(gm, g, sizeof(float) * static_cast<size_t>(N * C));
    return;
  }
  matmul_backward(s, tp.rank() == 0 ? sc.dx : Tensor{}, grad.coef, Tensor{}, sc.dcoef, x, w.coef);
  if (tp.rank() == 0)
    for (int64_t i = 0; i < N * C; ++i) dx[i] += from[i];
  const float* c = a.coef.f32();
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = t * C; j < (t + 1) * C; ++j) gm[j] = c[2 * t + 1] * g[j];
}

}  // namespace megatrain
