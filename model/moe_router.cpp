// The MoE router (model/moe_router.h): scores, top-k choice, gates, capacity dropping, the aux and
// z losses, and their backward to the logits. Invariants: everything downstream of the scores reads
// the stored float scores, so router_backward differentiates exactly the function router_forward
// computed; per-token work may run on any number of threads, and every sum over tokens runs in token
// order in double, so the results do not depend on the thread count.
#include "model/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/check.h"

namespace megatrain {
namespace {

void check_spec(const RouterSpec& spec, int64_t n_tokens) {
  MT_CHECK(spec.n_experts > 0 && spec.top_k >= 1 && spec.top_k <= spec.n_experts,
           "router: top_k = {} must lie in 1 … n_experts = {}", spec.top_k, spec.n_experts);
  MT_CHECK(spec.capacity_factor >= 0.0f, "router: capacity_factor = {} must be ≥ 0 (0 = dropless)",
           spec.capacity_factor);
  MT_CHECK(n_tokens >= 0, "router: n_tokens = {} must be ≥ 0", n_tokens);
}

// log Σ_e exp(z_e), shifted by the row's maximum so that no exp overflows.
double logsumexp(const float* z, int n_experts) {
  double m = z[0];
  for (int e = 1; e < n_experts; ++e) m = std::max(m, static_cast<double>(z[e]));
  double sum = 0.0;
  for (int e = 0; e < n_experts; ++e) sum += std::exp(static_cast<double>(z[e]) - m);
  return m + std::log(sum);
}

// Stable for any |z| in this form: for large negative z, exp(-z) overflows to inf and 1 / inf = 0
// is the right limit; the form e^z / (1 + e^z) would give inf / inf = NaN for large positive z.
double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// The k largest s_e + bias_e in descending order; the strict > sends ties to the lower index. Each
// pass is seeded with the first expert not yet chosen, so a NaN key (a diverged step, which the
// trainer's bad-step check handles) still yields k distinct, valid experts.
void choose_top_k(int32_t* expert, const float* s, const float* bias, int n_experts, int k) {
  for (int j = 0; j < k; ++j) {
    int best = -1;
    double best_key = 0.0;
    for (int e = 0; e < n_experts; ++e) {
      if (std::find(expert, expert + j, e) != expert + j) continue;
      const double key = static_cast<double>(s[e]) + (bias ? static_cast<double>(bias[e]) : 0.0);
      if (best < 0 || key > best_key) {
        best = e;
        best_key = key;
      }
    }
    expert[j] = best;
  }
}

// Σ_j s_e_j over a token's k chosen experts: the gates' normaliser for k > 1.
double chosen_sum(const float* s, const int32_t* expert, int k) {
  double sum = 0.0;
  for (int j = 0; j < k; ++j) sum += s[expert[j]];
  return sum;
}

// The factor that turns a token's scores into its aux-loss distribution p_t: 1 for softmax (already
// a distribution), 1 / Σ_e s_t,e for sigmoid. A sigmoid row whose scores all underflowed to 0 gets
// p_t = 0 instead of 0/0 (Megatron adds 1e-20 to the sum to the same end).
double aux_p_scale(RouterKind kind, const float* s, int n_experts) {
  if (kind == RouterKind::softmax) return 1.0;
  double sum = 0.0;
  for (int e = 0; e < n_experts; ++e) sum += s[e];
  return sum > 0.0 ? 1.0 / sum : 0.0;
}

// c_e: assignments choosing e, kept or not (the aux loss counts choices, not capacity).
std::vector<int64_t> choice_counts(const int32_t* expert, int64_t n_assignments, int n_experts) {
  std::vector<int64_t> c(static_cast<size_t>(n_experts), 0);
  for (int64_t a = 0; a < n_assignments; ++a) ++c[static_cast<size_t>(expert[a])];
  return c;
}

// Clears kept and the gate of each assignment past its expert's capacity C, chosen per spec.drop.
void drop_over_capacity(const RouterSpec& spec, int64_t n_tokens, const float* scores, const int32_t* expert,
                        float* gates, int32_t* kept) {
  const int E = spec.n_experts, k = spec.top_k;
  const int64_t C = expert_capacity(spec, n_tokens), n_assignments = n_tokens * k;
  // Group the assignments a = t·k + j by expert, each group in token order (a counting sort).
  std::vector<int64_t> start(static_cast<size_t>(E) + 1, 0);
  for (int64_t a = 0; a < n_assignments; ++a) ++start[static_cast<size_t>(expert[a]) + 1];
  for (int e = 0; e < E; ++e) start[e + 1] += start[e];
  std::vector<int64_t> next(start.begin(), start.end() - 1), order(static_cast<size_t>(n_assignments));
  for (int64_t a = 0; a < n_assignments; ++a) order[static_cast<size_t>(next[expert[a]]++)] = a;
  for (int e = 0; e < E; ++e) {
    const auto first = order.begin() + start[e], last = order.begin() + start[e + 1];
    if (last - first <= C) continue;
    if (spec.drop == DropPolicy::probs) {
      // Highest score first; the stable sort keeps token order among equal scores, so ties go to the
      // lower token. A NaN score ranks last, keeping the comparison a strict weak order.
      const auto key = [&](int64_t a) {
        const float v = scores[a / k * E + e];
        return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
      };
      std::stable_sort(first, last, [&](int64_t a, int64_t b) { return key(a) > key(b); });
    }
    for (auto it = first + C; it != last; ++it) {
      kept[*it] = 0;
      gates[*it] = 0.0f;
    }
  }
}

}  // namespace

RouterAuxSums router_aux_sums(const RouterSpec& spec, int64_t n_tokens, const float* scores, const int32_t* expert) {
  const int E = spec.n_experts;
  RouterAuxSums out;
  out.n_tokens = static_cast<double>(n_tokens);
  out.counts.assign(static_cast<size_t>(E), 0.0);
  out.p_sums.assign(static_cast<size_t>(E), 0.0);
  const std::vector<int64_t> c = choice_counts(expert, n_tokens * spec.top_k, E);
  for (int e = 0; e < E; ++e) out.counts[static_cast<size_t>(e)] = static_cast<double>(c[static_cast<size_t>(e)]);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* s = scores + t * E;
    const double scale = aux_p_scale(spec.kind, s, E);
    for (int e = 0; e < E; ++e) out.p_sums[static_cast<size_t>(e)] += s[e] * scale;
  }
  return out;
}

double router_aux_loss(const RouterSpec& spec, const RouterAuxSums& sums) {
  if (sums.n_tokens == 0.0) return 0.0;
  const int E = spec.n_experts;
  double sum = 0.0;
  for (int e = 0; e < E; ++e) sum += sums.counts[static_cast<size_t>(e)] * sums.p_sums[static_cast<size_t>(e)];
  const double N = sums.n_tokens;
  return E / (N * spec.top_k) * sum / N;
}

RouterSpec router_spec(const MoeConfig& moe) {
  return RouterSpec{moe.n_experts, moe.top_k, moe.router, moe.capacity_factor, moe.drop_policy};
}

int64_t expert_capacity(const RouterSpec& spec, int64_t n_tokens) {
  check_spec(spec, n_tokens);
  if (spec.capacity_factor == 0.0f) return n_tokens;
  const double c =
      static_cast<double>(spec.capacity_factor) * static_cast<double>(n_tokens) * spec.top_k / spec.n_experts;
  // capacity_factor is the float nearest the decimal the user wrote, up to 2^-24 above it (1.1f =
  // 1.10000002…); without the margin a product that is a whole number in decimals (1.1 · 10 / 11)
  // would round up to one more than the user asked for. The margin is far below any meaningful
  // difference in the factor.
  return static_cast<int64_t>(std::ceil(c * (1.0 - 0x1p-22)));
}

RouterStats router_forward(const RouterSpec& spec, int64_t n_tokens, const float* logits, const float* bias,
                           float* scores, int32_t* expert, float* gates, int32_t* kept, int64_t* tokens_per_expert) {
  check_spec(spec, n_tokens);
  const int E = spec.n_experts, k = spec.top_k;
  std::vector<double> lse(static_cast<size_t>(n_tokens));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* z = logits + t * E;
    float* s = scores + t * E;
    lse[t] = logsumexp(z, E);
    for (int e = 0; e < E; ++e)
      s[e] = static_cast<float>(spec.kind == RouterKind::softmax ? std::exp(z[e] - lse[t]) : sigmoid(z[e]));
    int32_t* ex = expert + t * k;
    choose_top_k(ex, s, bias, E, k);
    // A row whose chosen scores all underflowed to 0 gets gates 0 rather than 0/0.
    const double sum = chosen_sum(s, ex, k);
    for (int j = 0; j < k; ++j) {
      gates[t * k + j] = k == 1 ? s[ex[0]] : (sum > 0.0 ? static_cast<float>(s[ex[j]] / sum) : 0.0f);
      kept[t * k + j] = 1;
    }
  }
  if (spec.capacity_factor > 0.0f) drop_over_capacity(spec, n_tokens, scores, expert, gates, kept);

  RouterStats stats;
  std::fill(tokens_per_expert, tokens_per_expert + E, 0);
  for (int64_t a = 0; a < n_tokens * k; ++a) {
    if (kept[a])
      ++tokens_per_expert[expert[a]];
    else
      ++stats.dropped;
  }
  stats.sums = router_aux_sums(spec, n_tokens, scores, expert);
  stats.aux = router_aux_loss(spec, stats.sums);
  double z_sum = 0.0;
  for (int64_t t = 0; t < n_tokens; ++t) z_sum += lse[t] * lse[t];
  stats.z = n_tokens > 0 ? z_sum / static_cast<double>(n_tokens) : 0.0;
  return stats;
}

void router_backward(const RouterSpec& spec, int64_t n_tokens, const float* logits, const float* scores,
                     const int32_t* expert, const int32_t* kept, const float* dgates, float aux_grad, float z_grad,
                     float* dlogits, const RouterAuxSums* aux_totals) {
  check_spec(spec, n_tokens);
  if (n_tokens == 0) return;
  const int E = spec.n_experts, k = spec.top_k;
  const double N = static_cast<double>(n_tokens);
  // ∂(aux_grad · aux)/∂p_t,e = aux_grad · E · c_e / (N²·k), the same for every token (c_e and N of
  // the aux loss's tokens: these, or aux_totals').
  std::vector<double> w(static_cast<size_t>(E), 0.0);
  if (aux_grad != 0.0f) {
    const RouterAuxSums local = aux_totals ? RouterAuxSums{} : router_aux_sums(spec, n_tokens, scores, expert);
    const RouterAuxSums& a = aux_totals ? *aux_totals : local;
    for (int e = 0; e < E; ++e)
      w[e] = aux_grad * static_cast<double>(E) * a.counts[static_cast<size_t>(e)] / (a.n_tokens * a.n_tokens * k);
  }
#pragma omp parallel
  {
    std::vector<double> ds(static_cast<size_t>(E));  // ∂L/∂s_t, then ∂L/∂z_t
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* z = logits + t * E;
      const float* s = scores + t * E;
      const int32_t* ex = expert + t * k;
      const int32_t* kp = kept + t * k;
      const float* dg = dgates + t * k;
      std::fill(ds.begin(), ds.end(), 0.0);

      // Gates. For k > 1 the normaliser spans all k chosen, dropped ones too (no renormalisation
      // after dropping): ∂/∂s_i Σ_j kept_j·dg_j·s_j/S = (kept_i·dg_i − Σ_j kept_j·dg_j·g_j) / S.
      if (k == 1) {
        if (kp[0]) ds[ex[0]] += dg[0];
      } else if (const double sum = chosen_sum(s, ex, k); sum > 0.0) {
        double dg_dot_g = 0.0;
        for (int j = 0; j < k; ++j)
          if (kp[j]) dg_dot_g += dg[j] * (s[ex[j]] / sum);
        for (int j = 0; j < k; ++j) ds[ex[j]] += ((kp[j] ? dg[j] : 0.0) - dg_dot_g) / sum;
      }

      // Aux: p_t = s_t · scale; for sigmoid scale = 1/Σ_e s_t,e also depends on s_t.
      if (aux_grad != 0.0f) {
        const double scale = aux_p_scale(spec.kind, s, E);
        if (spec.kind == RouterKind::softmax) {
          for (int e = 0; e < E; ++e) ds[e] += w[e];
        } else if (scale > 0.0) {
          double w_dot_p = 0.0;
          for (int e = 0; e < E; ++e) w_dot_p += w[e] * s[e] * scale;
          for (int e = 0; e < E; ++e) ds[e] += (w[e] - w_dot_p) * scale;
        }
      }

      // Scores to logits.
      if (spec.kind == RouterKind::softmax) {
        double ds_dot_s = 0.0;
        for (int e = 0; e < E; ++e) ds_dot_s += ds[e] * s[e];
        for (int e = 0; e < E; ++e) ds[e] = s[e] * (ds[e] - ds_dot_s);
      } else {
        for (int e = 0; e < E; ++e) ds[e] *= static_cast<double>(s[e]) * (1.0 - s[e]);
      }

      // z loss, from the logits themselves: ∂/∂z_t,e (lse_t)² / N = 2·lse_t·softmax(z_t)_e / N.
      if (z_grad != 0.0f) {
        const double lse = logsumexp(z, E), c = 2.0 * z_grad * lse / N;
        for (int e = 0; e < E; ++e) ds[e] += c * std::exp(z[e] - lse);
      }
      for (int e = 0; e < E; ++e) dlogits[t * E + e] = static_cast<float>(ds[e]);
    }
  }
}

}  // namespace megatrain
