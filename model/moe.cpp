#include "model/moe.h"

#include <algorithm>
#include <chrono>
#include <optional>

namespace megatrain {
namespace {

// Rows [first, first + n) of a 2-D tensor.
Tensor rows_of(Tensor t, int64_t first, int64_t n) { return t.part(first * t.shape[1], Shape{n, t.shape[1]}); }

// Expert x's matrix of a 3-D expert tensor.
Tensor expert_of(Tensor t, int x) { return t.part(x * t.shape[1] * t.shape[2], Shape{t.shape[1], t.shape[2]}); }

int64_t fc_width(const ModelConfig& cfg, int64_t units) {
  return cfg.activation == ActivationKind::swiglu ? 2 * units : units;
}

// Adds the wall time from construction to the end of its scope to *ms (nothing when null): the
// token movement of a layer (permute, exchanges, regrouping, un-permute), for the logs.
class DispatchTimer {
 public:
  explicit DispatchTimer(double* ms) : ms_(ms), t0_(std::chrono::steady_clock::now()) {}
  ~DispatchTimer() {
    if (ms_) *ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }
  DispatchTimer(const DispatchTimer&) = delete;
  DispatchTimer& operator=(const DispatchTimer&) = delete;

 private:
  double* ms_;
  std::chrono::steady_clock::time_point t0_;
};

int64_t local_units(const ModelConfig& cfg, const TpShape& tp) { return cfg.expert_ffn_dim() / tp.size(); }

// [Note: host routing] The router and the permutation plan run on the host. A CPU stage's
// tensors are host memory and are read and written in place; a device stage's come down into the
// scratch's host copies (down) or are written there (target) and then go up (up).
template <class T>
const T* down(const Stream& s, Tensor t, std::vector<T>& host) {
  if (t.device == Device::cpu) return static_cast<const T*>(t.data);
  copy_to_host(s, host.data(), t);
  return host.data();
}
template <class T>
T* target(Tensor t, std::vector<T>& host) {
  return t.device == Device::cpu ? static_cast<T*>(t.data) : host.data();
}
template <class T>
void up(const Stream& s, Tensor t, const std::vector<T>& host) {
  if (t.device != Device::cpu) copy_from_host(s, t, host.data());
}

// Each local expert's MLP on its grouped rows: out = Act(in · FC_xᵀ) · Proj_xᵀ, saving fc and act.
void experts_forward(const Stream& s, const ModelConfig& cfg, const ExpertDispatch& d, const DispatchCounts& c,
                     Tensor out, MoeActivations& a, const MoeWeights& w) {
  for (int x = 0; x < d.local_experts(); ++x) {
    const int64_t at = d.expert_offset(c, x), n = d.expert_rows(c, x);
    if (n > 0) matmul_forward(s, rows_of(a.fc, at, n), rows_of(a.grouped_in, at, n), expert_of(w.fc, x), Tensor{});
  }
  const Tensor fc = rows_of(a.fc, 0, c.received), act = rows_of(a.act, 0, c.received);
  if (c.received > 0) {
    if (cfg.activation == ActivationKind::gelu)
      gelu_forward(s, act, fc);
    else
      swiglu_forward(s, act, fc);
  }
  for (int x = 0; x < d.local_experts(); ++x) {
    const int64_t at = d.expert_offset(c, x), n = d.expert_rows(c, x);
    if (n > 0) matmul_forward(s, rows_of(out, at, n), rows_of(a.act, at, n), expert_of(w.proj, x), Tensor{});
  }
}

// The reverse: `grads` holds the output gradients of the grouped rows and receives their input
// gradients (partial over tp); the experts' weight gradients `+=`.
void experts_backward(const Stream& s, const ModelConfig& cfg, const ExpertDispatch& d, const DispatchCounts& c,
                      Tensor grads, MoeScratch& ms, const MoeActivations& a, const MoeWeights& grad,
                      const MoeWeights& w) {
  for (int x = 0; x < d.local_experts(); ++x) {
    const int64_t at = d.expert_offset(c, x), n = d.expert_rows(c, x);
    if (n > 0)
      matmul_backward(s, rows_of(ms.dact, at, n), expert_of(grad.proj, x), Tensor{}, rows_of(grads, at, n),
                      rows_of(a.act, at, n), expert_of(w.proj, x));
  }
  if (c.received > 0) {
    const Tensor dfc = rows_of(ms.dfc, 0, c.received), dact = rows_of(ms.dact, 0, c.received);
    if (cfg.activation == ActivationKind::gelu)
      gelu_backward(s, dfc, dact, rows_of(a.fc, 0, c.received));
    else
      swiglu_backward(s, dfc, dact, rows_of(a.fc, 0, c.received));
  }
  for (int x = 0; x < d.local_experts(); ++x) {
    const int64_t at = d.expert_offset(c, x), n = d.expert_rows(c, x);
    if (n > 0)
      matmul_backward(s, rows_of(grads, at, n), expert_of(grad.fc, x), Tensor{}, rows_of(ms.dfc, at, n),
                      rows_of(a.grouped_in, at, n), expert_of(w.fc, x));
  }
}

}  // namespace

void moe_update_bias(float* bias, const int64_t* load, int n_experts, float rate) {
  double mean = 0.0;
  for (int e = 0; e < n_experts; ++e) mean += static_cast<double>(load[e]);
  mean /= n_experts;
  for (int e = 0; e < n_experts; ++e) {
    const auto l = static_cast<double>(load[e]);
    bias[e] += l < mean ? rate : l > mean ? -rate : 0.0f;
  }
}

int64_t moe_max_received(const ModelConfig& cfg, int ep, int64_t n_tokens) {
  const int local = cfg.moe.n_experts / ep;
  const int64_t dropless = ep * n_tokens * std::min(cfg.moe.top_k, local);
  if (cfg.moe.capacity_factor <= 0.0f) return dropless;
  return std::min(dropless, int64_t{ep} * local * expert_capacity(router_spec(cfg.moe), n_tokens));
}

MoeActivations moe_activations(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int ep, int64_t rows) {
  const int64_t E = cfg.moe.n_experts, k = cfg.moe.top_k, C = cfg.d_model, R = moe_max_received(cfg, ep, rows);
  const int64_t F = local_units(cfg, tp);
  MoeActivations a;
  a.norm = norm_activations(arena, cfg, tp.local_rows());
  a.logits = arena.tensor(Shape{rows, E});
  a.scores = arena.tensor(Shape{rows, E});
  a.expert = arena.tensor_i32(Shape{rows, k});
  a.kept = arena.tensor_i32(Shape{rows, k});
  a.gates = arena.tensor(Shape{rows, k});
  a.row = arena.tensor_i32(Shape{rows, k});
  a.grouped_in = arena.tensor(Shape{R, C});
  a.fc = arena.tensor(Shape{R, fc_width(cfg, F)});
  a.act = arena.tensor(Shape{R, F});
  a.out_send = arena.tensor(Shape{rows * k, C});
  a.counts.all.reserve(static_cast<size_t>(E * ep));
  a.stats.tokens.resize(static_cast<size_t>(E));
  if (cfg.moe.dense_branch_units(cfg.expert_ffn_dim()) > 0) a.dense = dense_branch_activations(arena, cfg, tp, rows);
  return a;
}

MoeScratch moe_scratch(Arena& arena, const ModelConfig& cfg, const TpShape& tp, int ep, int64_t rows) {
  const int64_t E = cfg.moe.n_experts, k = cfg.moe.top_k, C = cfg.d_model, R = moe_max_received(cfg, ep, rows);
  const int64_t F = local_units(cfg, tp);
  MoeScratch m;
  m.send = arena.tensor(Shape{rows * k, C});
  m.by_source = arena.tensor(Shape{R, C});
  m.grouped = arena.tensor(Shape{R, C});
  m.dfc = arena.tensor(Shape{R, fc_width(cfg, F)});
  m.dact = arena.tensor(Shape{R, F});
  m.dgates = arena.tensor(Shape{rows, k});
  m.dlogits = arena.tensor(Shape{rows, E});
  m.send_counts.resize(static_cast<size_t>(E));
  m.dx = arena.tensor(Shape{rows, C});
  if (cfg.moe.dense_branch_units(cfg.expert_ffn_dim()) > 0) {
    m.dense = dense_branch_scratch(arena, cfg, tp, rows);
    m.dy_experts = arena.tensor(Shape{rows, C});
  }
  if (arena.device() != Device::cpu) {  // [Note: host routing]
    MoeHostRouting& h = m.host;
    const auto NE = static_cast<size_t>(rows * E), Nk = static_cast<size_t>(rows * k);
    h.logits.resize(NE), h.scores.resize(NE), h.dlogits.resize(NE), h.bias.resize(static_cast<size_t>(E));
    h.gates.resize(Nk), h.dgates.resize(Nk), h.expert.resize(Nk), h.kept.resize(Nk), h.row.resize(Nk);
  }
  return m;
}

void moe_sublayer_forward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, const MoeRuntime& moe,
                          Tensor out, MoeActivations& a, BlockScratch& sc, Tensor x_mid, const MoeWeights& w,
                          const DropoutSite& drop) {
  const ExpertDispatch& d = *moe.dispatch;
  MoeScratch& ms = *moe.scratch;
  const int64_t N = a.logits.shape[0], k = moe.spec.top_k;
  norm_forward(s, cfg, a.norm, x_mid, w.norm);
  const Tensor x = enter_region(tp, a.norm, sc.gathered);
  matmul_forward(s, a.logits, x, w.router, Tensor{});
  MoeHostRouting& h = ms.host;  // [Note: host routing]
  int32_t *expert = target(a.expert, h.expert), *kept = target(a.kept, h.kept), *row = target(a.row, h.row);
  float* gates = target(a.gates, h.gates);
  a.stats.router = router_forward(moe.spec, N, down(s, a.logits, h.logits),
                                  w.router_bias.data ? down(s, w.router_bias, h.bias) : nullptr,
                                  target(a.scores, h.scores), expert, gates, kept, a.stats.tokens.data());
  {  // the aux loss is the whole sequences': its sums added over the ranks that hold them
    RouterAuxSums& t = a.aux_totals;
    t = std::move(a.stats.router.sums);  // this rank's, from the routing above
    std::vector<double> all(t.counts);
    all.insert(all.end(), t.p_sums.begin(), t.p_sums.end());
    all.push_back(t.n_tokens);
    moe.sequence->sum_over_sequence(all);
    const auto E = static_cast<ptrdiff_t>(t.counts.size());
    t.counts.assign(all.begin(), all.begin() + E);
    t.p_sums.assign(all.begin() + E, all.begin() + 2 * E);
    t.n_tokens = all.back();
    a.stats.router.aux = router_aux_loss(moe.spec, t);
  }
  std::optional<DispatchTimer> timer(moe.dispatch_ms);
  // Permute: a kept assignment's row in expert order (= destination-major), tokens in order.
  std::vector<int64_t>& next = ms.send_counts;
  int64_t at = 0;
  for (size_t e = 0; e < next.size(); ++e) {
    const int64_t n = a.stats.tokens[e];
    next[e] = at;
    at += n;
  }
  for (int64_t i = 0; i < N * k; ++i)
    row[i] = kept[i] ? static_cast<int32_t>(next[static_cast<size_t>(expert[i])]++) : -1;
  up(s, a.scores, h.scores), up(s, a.expert, h.expert), up(s, a.kept, h.kept), up(s, a.gates, h.gates);
  up(s, a.row, h.row);
  moe_permute(s, ms.send, x, a.row);
  d.plan(a.counts, a.stats.tokens.data());
  d.dispatch_start(a.counts, ms.by_source, ms.send).wait();
  d.dispatch_finish(a.counts, a.grouped_in, ms.by_source);
  timer.reset();
  experts_forward(s, cfg, d, a.counts, ms.grouped, a, w);
  timer.emplace(moe.dispatch_ms);
  d.combine_regroup(a.counts, ms.by_source, ms.grouped);
  d.combine_start(a.counts, a.out_send, ms.by_source).wait();
  // Un-permute, weighted by the gates, in (token, choice) order: this rank's partial output.
  const Tensor partial = full_rows(tp, sc.proj, sc.partial);
  moe_unpermute(s, partial, a.out_send, a.row, a.gates);
  timer.reset();
  if (w.dense.fc.data != nullptr) dense_branch_forward(s, cfg, partial, a.dense, x, w.dense);
  tp.leave_forward(sc.proj, partial);
  apply_dropout(s, sc.proj, drop, kSiteMlp);
  add_forward(s, out, x_mid, sc.proj);
}

void moe_sublayer_backward(const Stream& s, const ModelConfig& cfg, const TensorParallel& tp, const MoeRuntime& moe,
                           Tensor dmid, const MoeWeights& grad, Tensor dout, const MoeActivations& a,
                           BlockScratch& sc, Tensor x_mid, const MoeWeights& w, const DropoutSite& drop) {
  const ExpertDispatch& d = *moe.dispatch;
  MoeScratch& ms = *moe.scratch;
  const int64_t N = a.logits.shape[0], k = moe.spec.top_k;
  const Tensor dproj = through_dropout(s, dout, sc.proj, drop, kSiteMlp);
  const Tensor dy = full_rows(tp, dproj, sc.partial);
  tp.leave_backward(dy, dproj);
  const Tensor x = enter_region(tp, a.norm, sc.gathered);
  const Tensor dfull = full_rows(tp, sc.dnorm, sc.dfull);
  zero_fill(s, dfull);
  // A dense branch beside the experts takes its share of dy and leaves the experts theirs.
  Tensor dy_experts = dy;
  if (w.dense.fc.data != nullptr) {
    dense_branch_backward(s, cfg, tp, dfull, ms.dy_experts, grad.dense, dy, a.dense, ms.dense, x, w.dense);
    dy_experts = ms.dy_experts;
  }
  // The gates' gradient (summed over tp: each rank holds a partial expert output) and the expert
  // outputs' gradient in send order.
  moe_unpermute_backward(s, ms.dgates, ms.send, dy_experts, a.out_send, a.row, a.gates);
  if (tp.size() > 1) tp.comm().all_reduce(ms.dgates.f32(), N * k).wait();
  // Router: dlogits, its weight gradient (the same on every tp rank), and its input gradient —
  // counted once, by tp rank 0, before the sum over tp.
  MoeHostRouting& h = ms.host;  // [Note: host routing]
  // loss_grad weighs this rank's share of a micro-batch (with cp, 1/cp of its tokens); the aux loss
  // is the whole micro-batch's, so its weight is sequence_ranks() times that.
  const auto ranks = static_cast<float>(moe.sequence->sequence_ranks());
  router_backward(moe.spec, N, down(s, a.logits, h.logits), down(s, a.scores, h.scores), down(s, a.expert, h.expert),
                  down(s, a.kept, h.kept), down(s, ms.dgates, h.dgates), moe.aux_coef * moe.loss_grad * ranks,
                  moe.z_coef * moe.loss_grad, target(ms.dlogits, h.dlogits), &a.aux_totals);
  up(s, ms.dlogits, h.dlogits);
  matmul_backward(s, tp.rank() == 0 ? ms.dx : Tensor{}, grad.router, Tensor{}, ms.dlogits, x, w.router);
  if (tp.rank() == 0) add_forward(s, dfull, dfull, ms.dx);
  // Experts: dispatch the gradients, run the experts backward, combine the input gradients.
  std::optional<DispatchTimer> timer(moe.dispatch_ms);
  d.dispatch_start(a.counts, ms.by_source, ms.send).wait();
  d.dispatch_finish(a.counts, ms.grouped, ms.by_source);
  timer.reset();
  experts_backward(s, cfg, d, a.counts, ms.grouped, ms, a, grad, w);
  timer.emplace(moe.dispatch_ms);
  d.combine_regroup(a.counts, ms.by_source, ms.grouped);
  d.combine_start(a.counts, ms.send, ms.by_source).wait();
  moe_permute_backward(s, dfull, ms.send, a.row);
  timer.reset();
  tp.enter_backward(sc.dnorm, dfull).wait();
  norm_backward(s, cfg, dmid, grad.norm, sc.dnorm, dout, a.norm, x_mid, w.norm);
}

}  // namespace megatrain
