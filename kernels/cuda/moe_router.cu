// MoE routing on the GPU: the router's scores, top-k choice and gates (model/moe_router.h) and
// their backward to the logits (gates, aux and z losses); the permutation of token rows into
// expert-contiguous order with capacity dropping by position; the permute / un-permute-combine of
// the rows with their backward passes (model/moe.cpp). Left on the CPU: capacity dropping by
// probability (the plan numbers the rows of what it kept) and the aux and z loss values (logged).
// Everything is deterministic: no float atomics, every sum in a fixed order, and the permutation is
// the CPU's (assignments a = t·k + j grouped by expert, in a order within an expert).
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/common.cuh"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kWarps = 8;             // tokens (or assignments) per block, one warp each
constexpr int kMaxExperts = 32 * 32;  // a lane's chosen experts fit one 32-bit mask
constexpr int kPlanBlock = 256;       // assignments per block of the permutation plan

// A top-k candidate. ok: a real expert with a comparable key; a NaN key ranks below every number
// and an empty candidate (e = INT32_MAX, a lane with no expert left) below everything, so the k
// chosen are always distinct, valid experts.
struct Candidate {
  double key;
  float score;
  int e;
  bool ok;
};
// Whether a ranks above b: the higher key, ties to the lower expert.
__device__ inline bool above(const Candidate& a, const Candidate& b) {
  if (a.ok != b.ok) return a.ok;
  if (a.ok && a.key != b.key) return a.key > b.key;
  return a.e < b.e;
}

// Scores as the CPU computes them (double, rounded to float), so the choice, which reads the
// stored float scores, agrees with the CPU's; then k rounds of a warp arg-max over the experts not
// yet chosen, lane l owning experts l, l + 32, …; then the gates. One warp per token.
__global__ void route_kernel(float* scores, int32_t* expert, float* gates, int32_t* kept, const float* logits,
                             const float* bias, int64_t N, int E, int k, bool sigmoid) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / warpSize;
  if (t >= N) return;
  const float* z = logits + t * E;
  float* s = scores + t * E;
  double lse = 0.0;
  if (!sigmoid) {
    double m = -INFINITY;
    for (int e = lane; e < E; e += warpSize) m = fmax(m, static_cast<double>(z[e]));
    for (int offset = 16; offset > 0; offset >>= 1) m = fmax(m, __shfl_xor_sync(kFullMask, m, offset));
    double sum = 0.0;
    for (int e = lane; e < E; e += warpSize) sum += exp(static_cast<double>(z[e]) - m);
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFullMask, sum, offset);
    lse = m + log(sum);
  }
  for (int e = lane; e < E; e += warpSize)
    s[e] = static_cast<float>(sigmoid ? 1.0 / (1.0 + exp(-static_cast<double>(z[e])))
                                      : exp(static_cast<double>(z[e]) - lse));
  unsigned chosen = 0;  // bit i: expert lane + 32·i is taken
  double chosen_sum = 0.0;
  for (int j = 0; j < k; ++j) {
    Candidate best{0.0, 0.0f, INT32_MAX, false};
    for (int i = 0, e = lane; e < E; ++i, e += warpSize) {
      if (chosen >> i & 1u) continue;
      const double key = static_cast<double>(s[e]) + (bias ? static_cast<double>(bias[e]) : 0.0);
      const Candidate c{key, s[e], e, !isnan(key)};
      if (above(c, best)) best = c;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const Candidate other{__shfl_xor_sync(kFullMask, best.key, offset),
                            __shfl_xor_sync(kFullMask, best.score, offset), __shfl_xor_sync(kFullMask, best.e, offset),
                            __shfl_xor_sync(kFullMask, static_cast<int>(best.ok), offset) != 0};
      if (above(other, best)) best = other;
    }
    if (best.e % warpSize == lane) chosen |= 1u << (best.e / warpSize);
    chosen_sum += best.score;  // every lane holds the same winners, summed in j order
    if (lane == 0) {
      expert[t * k + j] = best.e;
      gates[t * k + j] = best.score;
      kept[t * k + j] = 1;
    }
  }
  // Renormalise over the k chosen (k > 1); a row whose chosen scores all underflowed gets 0.
  if (k > 1 && lane == 0)
    for (int j = 0; j < k; ++j)
      gates[t * k + j] = chosen_sum > 0.0 ? static_cast<float>(gates[t * k + j] / chosen_sum) : 0.0f;
}

// ∂L/∂logits of one token (one warp), as router_backward: the gates' gradient (renormalised over
// the k chosen for k > 1, dropped choices counted in the normaliser), the aux loss's
// aux_coef · c_e per score (through p = s / Σ s for sigmoid), the scores' Jacobian, and the z loss's
// z_coef · lse · softmax(z). ds_e is recomputed where needed instead of stored: E varies per model.
__global__ void router_backward_kernel(float* dlogits, const float* logits, const float* scores, const int32_t* expert,
                                       const int32_t* kept, const float* dgates, const int32_t* choices,
                                       double aux_coef, double z_coef, int64_t N, int E, int k, bool sigmoid) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / warpSize;
  if (t >= N) return;
  const float *z = logits + t * E, *s = scores + t * E, *dg = dgates + t * k;
  const int32_t *ex = expert + t * k, *kp = kept + t * k;
  const auto warp_total = [](double v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
    return v;
  };
  double chosen = 0.0, dg_dot_g = 0.0;  // Σ_j s_e_j and Σ_j kept_j·dg_j·g_j (k > 1)
  if (k > 1) {
    for (int j = 0; j < k; ++j) chosen += s[ex[j]];
    if (chosen > 0.0)
      for (int j = 0; j < k; ++j)
        if (kp[j]) dg_dot_g += dg[j] * (s[ex[j]] / chosen);
  }
  double scale = 1.0, w_dot_p = 0.0;  // sigmoid aux: p = s · scale, scale = 1 / Σ_e s_e
  if (aux_coef != 0.0 && sigmoid) {
    double sum = 0.0;
    for (int e = lane; e < E; e += warpSize) sum += s[e];
    sum = warp_total(sum);
    scale = sum > 0.0 ? 1.0 / sum : 0.0;
    double wp = 0.0;
    for (int e = lane; e < E; e += warpSize) wp += aux_coef * choices[e] * s[e] * scale;
    w_dot_p = warp_total(wp);
  }
  const auto ds_of = [&](int e) {  // ∂L/∂s_e
    double d = 0.0;
    if (k == 1) {
      if (ex[0] == e && kp[0]) d += dg[0];
    } else if (chosen > 0.0) {
      for (int j = 0; j < k; ++j)
        if (ex[j] == e) d += ((kp[j] ? dg[j] : 0.0) - dg_dot_g) / chosen;
    }
    if (aux_coef != 0.0) {
      const double w = aux_coef * choices[e];
      if (!sigmoid)
        d += w;
      else if (scale > 0.0)
        d += (w - w_dot_p) * scale;
    }
    return d;
  };
  double ds_dot_s = 0.0;
  if (!sigmoid) {
    for (int e = lane; e < E; e += warpSize) ds_dot_s += ds_of(e) * s[e];
    ds_dot_s = warp_total(ds_dot_s);
  }
  double lse = 0.0;
  if (z_coef != 0.0) {
    double m = -INFINITY;
    for (int e = lane; e < E; e += warpSize) m = fmax(m, static_cast<double>(z[e]));
    for (int offset = 16; offset > 0; offset >>= 1) m = fmax(m, __shfl_xor_sync(kFullMask, m, offset));
    double sum = 0.0;
    for (int e = lane; e < E; e += warpSize) sum += exp(static_cast<double>(z[e]) - m);
    lse = m + log(warp_total(sum));
  }
  for (int e = lane; e < E; e += warpSize) {
    const double se = s[e], d = ds_of(e);
    double g = sigmoid ? d * se * (1.0 - se) : se * (d - ds_dot_s);
    if (z_coef != 0.0) g += z_coef * lse * exp(static_cast<double>(z[e]) - lse);
    dlogits[t * E + e] = static_cast<float>(g);
  }
}

// c_e = Σ_b counts[b·E + e]: the choices of expert e (kept or not), for the aux loss's gradient.
__global__ void choice_total_kernel(int32_t* total, const int32_t* counts, int blocks, int E) {
  const int e = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (e >= E) return;
  int32_t sum = 0;
  for (int b = 0; b < blocks; ++b) sum += counts[b * E + e];
  total[e] = sum;
}

// Plan, step 1: block b's count of live assignments per expert (kept ones; all with kept =
// nullptr), at counts[b·E + e]. Shared integer atomics: their sum does not depend on the order.
__global__ void plan_count_kernel(int32_t* counts, const int32_t* expert, const int32_t* kept, int64_t n, int E) {
  MT_DYNAMIC_SHARED(int, count);
  for (int e = static_cast<int>(threadIdx.x); e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const int64_t a = static_cast<int64_t>(blockIdx.x) * kPlanBlock + threadIdx.x;
  if (a < n && (!kept || kept[a])) atomicAdd(&count[expert[a]], 1);
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < E; e += blockDim.x) counts[blockIdx.x * E + e] = count[e];
}

// Plan, step 2 (one block): counts[b·E + e] becomes the live assignments of expert e in blocks
// before b; tokens_per_expert[e] = min(live, capacity); offset[e] = Σ of those of experts < e.
__global__ void plan_scan_kernel(int32_t* counts, int32_t* offset, int64_t* tokens_per_expert, int blocks, int E,
                                 int64_t capacity) {
  for (int e = static_cast<int>(threadIdx.x); e < E; e += blockDim.x) {
    int32_t run = 0;
    for (int b = 0; b < blocks; ++b) {
      const int32_t c = counts[b * E + e];
      counts[b * E + e] = run;
      run += c;
    }
    tokens_per_expert[e] = run < capacity ? run : capacity;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // E ≤ 1024 additions: not worth a parallel scan
    int32_t at = 0;
    for (int e = 0; e < E; ++e) {
      offset[e] = at;
      at += static_cast<int32_t>(tokens_per_expert[e]);
    }
  }
}

// Plan, step 3: an assignment's rank in its expert = live ones of earlier blocks + earlier live
// ones of its own block with the same expert. Rank < capacity: row = offset + rank; otherwise
// dropped (kept 0, gate 0, row −1), the first `capacity` in token order staying (drop = position).
__global__ void plan_assign_kernel(int32_t* row, int32_t* kept, float* gates, const int32_t* expert,
                                   const int32_t* counts, const int32_t* offset, int64_t n, int E, int64_t capacity) {
  __shared__ int32_t mine[kPlanBlock];  // each assignment's expert, −1 where not live
  const int i = static_cast<int>(threadIdx.x);
  const int64_t a = static_cast<int64_t>(blockIdx.x) * kPlanBlock + i;
  const bool live = a < n && kept[a];
  const int e = live ? expert[a] : -1;
  mine[i] = e;
  __syncthreads();
  if (a >= n) return;
  if (!live) {
    row[a] = -1;
    return;
  }
  int32_t rank = counts[blockIdx.x * E + e];
  for (int p = 0; p < i; ++p) rank += mine[p] == e;
  if (rank < capacity) {
    row[a] = offset[e] + rank;
  } else {
    row[a] = -1;
    kept[a] = 0;
    gates[a] = 0.0f;
  }
}

// send[row[a]] = x[a / k] for each kept assignment a (one warp per assignment).
__global__ void permute_kernel(float* send, const float* x, const int32_t* row, int64_t n, int k, int C) {
  const int64_t a = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / warpSize;
  if (a >= n || row[a] < 0) return;
  const float* from = x + a / k * C;
  float* to = send + static_cast<int64_t>(row[a]) * C;
  for (int c = static_cast<int>(threadIdx.x) % warpSize; c < C; c += warpSize) to[c] = from[c];
}

// The transpose of the permutation: dx[t] += Σ_j dsend[row[t·k + j]] in j order (one warp a token).
__global__ void permute_backward_kernel(float* dx, const float* dsend, const int32_t* row, int64_t N, int k, int C) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / warpSize;
  if (t >= N) return;
  for (int c = static_cast<int>(threadIdx.x) % warpSize; c < C; c += warpSize) {
    float v = dx[t * C + c];
    for (int j = 0; j < k; ++j)
      if (const int32_t r = row[t * k + j]; r >= 0) v += dsend[static_cast<int64_t>(r) * C + c];
    dx[t * C + c] = v;
  }
}

// y[t] = Σ_j gate_t,j · out[row[t·k + j]] over the kept choices, in j order (one warp a token).
__global__ void unpermute_kernel(float* y, const float* out, const int32_t* row, const float* gates, int64_t N, int k,
                                 int C) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / warpSize;
  if (t >= N) return;
  for (int c = static_cast<int>(threadIdx.x) % warpSize; c < C; c += warpSize) {
    float v = 0.0f;
    for (int j = 0; j < k; ++j)
      if (const int32_t r = row[t * k + j]; r >= 0) v += gates[t * k + j] * out[static_cast<int64_t>(r) * C + c];
    y[t * C + c] = v;
  }
}

// dgates[a] = dy[t] · out[row[a]] (double, as the CPU), dout[row[a]] = gate_a · dy[t]; a dropped
// assignment gets dgate 0 (one warp per assignment).
__global__ void unpermute_backward_kernel(float* dgates, float* dout, const float* dy, const float* out,
                                          const int32_t* row, const float* gates, int64_t n, int k, int C) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize;
  const int64_t a = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / warpSize;
  if (a >= n) return;
  const int32_t r = row[a];
  if (r < 0) {
    if (lane == 0) dgates[a] = 0.0f;
    return;
  }
  const float* g = dy + a / k * C;
  const float* o = out + static_cast<int64_t>(r) * C;
  float* d = dout + static_cast<int64_t>(r) * C;
  const float gate = gates[a];
  double dot = 0.0;
  for (int c = lane; c < C; c += warpSize) {
    dot += static_cast<double>(g[c]) * o[c];
    d[c] = gate * g[c];
  }
  for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(kFullMask, dot, offset);
  if (lane == 0) dgates[a] = static_cast<float>(dot);
}

int plan_blocks(int64_t n) { return static_cast<int>(ceil_div(n, kPlanBlock)); }

}  // namespace

void moe_route(cudaStream_t stream, float* scores, int32_t* expert, float* gates, int32_t* kept, const float* logits,
               const float* bias, int64_t N, int E, int k, bool sigmoid) {
  if (E < 1 || E > kMaxExperts || k < 1 || k > E)
    throw std::invalid_argument("moe_route: needs 1 ≤ top_k ≤ n_experts ≤ 1024, got top_k = " +
                                std::to_string(k) + ", n_experts = " + std::to_string(E));
  if (N == 0) return;
  launch(route_kernel, dim3(ceil_div(N, kWarps)), dim3(kWarps * 32), 0, stream, scores, expert, gates, kept, logits,
         bias, N, E, k, sigmoid);
}

void moe_router_backward(cudaStream_t stream, float* dlogits, const float* logits, const float* scores,
                         const int32_t* expert, const int32_t* kept, const float* dgates, float aux_grad, float z_grad,
                         int64_t N, int E, int k, bool sigmoid, int32_t* scratch) {
  if (N == 0) return;
  const double n = static_cast<double>(N);
  int32_t* choices = scratch + static_cast<int64_t>(plan_blocks(N * k)) * E;
  if (aux_grad != 0.0f) {
    launch(plan_count_kernel, dim3(plan_blocks(N * k)), dim3(kPlanBlock), sizeof(int) * E, stream, scratch, expert,
           static_cast<const int32_t*>(nullptr), N * k, E);
    launch(choice_total_kernel, dim3(ceil_div(E, 256)), dim3(256), 0, stream, choices,
           static_cast<const int32_t*>(scratch), plan_blocks(N * k), E);
  }
  launch(router_backward_kernel, dim3(ceil_div(N, kWarps)), dim3(kWarps * 32), 0, stream, dlogits, logits, scores,
         expert, kept, dgates, static_cast<const int32_t*>(choices), static_cast<double>(aux_grad) * E / (n * n * k),
         2.0 * static_cast<double>(z_grad) / n, N, E, k, sigmoid);
}

size_t moe_plan_scratch_ints(int64_t n_assignments, int E) {
  return static_cast<size_t>(plan_blocks(n_assignments) + 1) * static_cast<size_t>(E);
}

void moe_permute_plan(cudaStream_t stream, int32_t* row, int32_t* kept, float* gates, int64_t* tokens_per_expert,
                      const int32_t* expert, int64_t n_assignments, int E, int64_t capacity, int32_t* scratch) {
  const int blocks = plan_blocks(n_assignments);
  int32_t *counts = scratch, *offset = scratch + static_cast<int64_t>(blocks) * E;
  if (blocks > 0)
    launch(plan_count_kernel, dim3(blocks), dim3(kPlanBlock), sizeof(int) * E, stream, counts, expert,
           static_cast<const int32_t*>(kept), n_assignments, E);
  launch(plan_scan_kernel, dim3(1), dim3(1024), 0, stream, counts, offset, tokens_per_expert, blocks, E, capacity);
  if (blocks > 0)
    launch(plan_assign_kernel, dim3(blocks), dim3(kPlanBlock), 0, stream, row, kept, gates, expert,
           static_cast<const int32_t*>(counts), static_cast<const int32_t*>(offset), n_assignments, E, capacity);
}

void moe_permute(cudaStream_t stream, float* send, const float* x, const int32_t* row, int64_t n_assignments, int k,
                 int C) {
  if (n_assignments == 0) return;
  launch(permute_kernel, dim3(ceil_div(n_assignments, kWarps)), dim3(kWarps * 32), 0, stream, send, x, row,
         n_assignments, k, C);
}

void moe_permute_backward(cudaStream_t stream, float* dx, const float* dsend, const int32_t* row, int64_t N, int k,
                          int C) {
  if (N == 0) return;
  launch(permute_backward_kernel, dim3(ceil_div(N, kWarps)), dim3(kWarps * 32), 0, stream, dx, dsend, row, N, k, C);
}

void moe_unpermute(cudaStream_t stream, float* y, const float* out, const int32_t* row, const float* gates, int64_t N,
                   int k, int C) {
  if (N == 0) return;
  launch(unpermute_kernel, dim3(ceil_div(N, kWarps)), dim3(kWarps * 32), 0, stream, y, out, row, gates, N, k, C);
}

void moe_unpermute_backward(cudaStream_t stream, float* dgates, float* dout, const float* dy, const float* out,
                            const int32_t* row, const float* gates, int64_t N, int k, int C) {
  if (N == 0) return;
  const int64_t n = N * k;
  launch(unpermute_backward_kernel, dim3(ceil_div(n, kWarps)), dim3(kWarps * 32), 0, stream, dgates, dout, dy, out,
         row, gates, n, k, C);
}

}  // namespace megatrain::MT_CUDA_NS
