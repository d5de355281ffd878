// Causal attention on CPU, block-wise with an online softmax (FlashAttention-2, Dao 2023,
// Algorithms 1 and 2): a query block walks the key blocks up to the diagonal keeping a running
// max m, normaliser l and output accumulator, so no T×T matrix is ever held; memory is O(T).
// Backward recomputes the probabilities from the saved log-sum-exp. Block products go through
// gemm (kernels/cpu/gemm.h) with strided views straight into the fused qkv buffer (no transposes).
// Grouped-query attention: query head h reads kv head h / (H / Hkv). Backward runs one task per
// (batch, kv head) so the dK/dV sums over the heads of a group have a fixed order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vec.h"

namespace megatrain::cpu {
namespace {

constexpr int kBlock = 64;
constexpr int kMaxHeadDim = 256;

struct Layout {
  int64_t row;  // floats per token in qkv
  template <typename F>
  F* q(F* base, int b, int T, int t, int h, int D) const {
    return base + (static_cast<int64_t>(b) * T + t) * row + static_cast<int64_t>(h) * D;
  }
};

// S = scale · Q Kᵀ for rows [i0, i0+m) and keys [j0, j0+n), with the causal mask (key > query → −inf).
void scores(float* S, const float* q, const float* k, int64_t ld, int m, int n, int D, float scale, int i0, int j0) {
  gemm(Trans::no, Trans::yes, m, n, D, scale, q, ld, k, ld, 0.0f, S, kBlock);
  if (j0 + n - 1 > i0) {
    for (int r = 0; r < m; ++r)
      for (int c = std::max(0, i0 + r - j0 + 1); c < n; ++c) S[r * kBlock + c] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d) {
  MT_CHECK(d.D <= kMaxHeadDim, "head_dim {} exceeds the CPU attention limit {}", d.D, kMaxHeadDim);
  const Layout L{static_cast<int64_t>(d.H + 2 * d.Hkv) * d.D};
  const int group = d.H / d.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int nq = (d.T + kBlock - 1) / kBlock;
  const int64_t out_row = static_cast<int64_t>(d.H) * d.D;
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.H; ++h)
      for (int qb = 0; qb < nq; ++qb) {
        alignas(64) float S[kBlock * kBlock];
        alignas(64) float O[kBlock * kMaxHeadDim];
        float m_run[kBlock], l_run[kBlock];
        const int i0 = qb * kBlock, m = std::min(kBlock, d.T - i0);
        const int kvh = h / group;
        const float* q = L.q(qkv, b, d.T, i0, h, d.D);
        std::fill(O, O + m * d.D, 0.0f);
        std::fill(m_run, m_run + m, -std::numeric_limits<float>::infinity());
        std::fill(l_run, l_run + m, 0.0f);
        for (int j0 = 0; j0 < i0 + m; j0 += kBlock) {
          const int n = std::min(kBlock, d.T - j0);
          const float* k = L.q(qkv, b, d.T, j0, d.H + kvh, d.D);
          const float* v = L.q(qkv, b, d.T, j0, d.H + d.Hkv + kvh, d.D);
          scores(S, q, k, L.row, m, n, d.D, scale, i0, j0);
          for (int r = 0; r < m; ++r) {
            float* s = S + r * kBlock;
            float mx = m_run[r];
            for (int c = 0; c < n; ++c) mx = std::max(mx, s[c]);
            const float corr = fast_exp(m_run[r] - mx);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < n; ++c) {
              s[c] = fast_exp(s[c] - mx);
              sum += s[c];
            }
            l_run[r] = l_run[r] * corr + sum;
            m_run[r] = mx;
            float* o = O + r * d.D;
            for (int c = 0; c < d.D; ++c) o[c] *= corr;
          }
          gemm(Trans::no, Trans::no, m, d.D, n, 1.0f, S, kBlock, v, L.row, 1.0f, O, d.D);
        }
        for (int r = 0; r < m; ++r) {
          float* dst = out + (static_cast<int64_t>(b) * d.T + i0 + r) * out_row + static_cast<int64_t>(h) * d.D;
          const float inv = 1.0f / l_run[r];
          for (int c = 0; c < d.D; ++c) dst[c] = O[r * d.D + c] * inv;
          lse[(static_cast<int64_t>(b) * d.H + h) * d.T + i0 + r] = m_run[r] + std::log(l_run[r]);
        }
      }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d) {
  const Layout L{static_cast<int64_t>(d.H + 2 * d.Hkv) * d.D};
  const int group = d.H / d.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int64_t out_row = static_cast<int64_t>(d.H) * d.D;
  const int64_t ld = L.row;
  const int64_t ldo = out_row;
  std::memset(dqkv, 0, sizeof(float) * static_cast<size_t>(d.B) * d.T * static_cast<size_t>(L.row));
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < d.B; ++b)
    for (int kvh = 0; kvh < d.Hkv; ++kvh) {
      alignas(64) float P[kBlock * kBlock];
      alignas(64) float dP[kBlock * kBlock];
      float Drow[kBlock];
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* lse_h = lse + (static_cast<int64_t>(b) * d.H + h) * d.T;
        for (int j0 = 0; j0 < d.T; j0 += kBlock) {
          const int n = std::min(kBlock, d.T - j0);
          const float* k = L.q(qkv, b, d.T, j0, d.H + kvh, d.D);
          const float* v = L.q(qkv, b, d.T, j0, d.H + d.Hkv + kvh, d.D);
          float* dk = L.q(dqkv, b, d.T, j0, d.H + kvh, d.D);
          float* dv = L.q(dqkv, b, d.T, j0, d.H + d.Hkv + kvh, d.D);
          for (int i0 = (j0 / kBlock) * kBlock; i0 < d.T; i0 += kBlock) {
            const int m = std::min(kBlock, d.T - i0);
            const float* q = L.q(qkv, b, d.T, i0, h, d.D);
            float* dq = L.q(dqkv, b, d.T, i0, h, d.D);
            const int64_t orow = (static_cast<int64_t>(b) * d.T + i0) * out_row + static_cast<int64_t>(h) * d.D;
            const float* o = out + orow;
            const float* dob = dout + orow;
            // 1. P = exp(S − lse), recomputed.
            scores(P, q, k, L.row, m, n, d.D, scale, i0, j0);
            for (int r = 0; r < m; ++r) {
              const float l = lse_h[i0 + r];
              float* p = P + r * kBlock;
#pragma omp simd
              for (int c = 0; c < n; ++c) p[c] = fast_exp(p[c] - l);
              float acc = 0.0f;
              for (int c = 0; c < d.D; ++c) acc += dob[r * out_row + c] * o[r * out_row + c];
              Drow[r] = acc;  // D_i = rowsum(dO ∘ O)
            }
            // 2. dV += Pᵀ dO.
            gemm(Trans::yes, Trans::no, n, d.D, m, 1.0f, P, kBlock, dob, ldo, 1.0f, dv, ld);
            // 3. dP = dO Vᵀ;  dS = P ∘ (dP − D).
            gemm(Trans::no, Trans::yes, m, n, d.D, 1.0f, dob, ldo, v, ld, 0.0f, dP, kBlock);
            for (int r = 0; r < m; ++r)
              for (int c = 0; c < n; ++c) dP[r * kBlock + c] = P[r * kBlock + c] * (dP[r * kBlock + c] - Drow[r]);
            // 4. dQ += scale · dS K;  dK += scale · dSᵀ Q.
            gemm(Trans::no, Trans::no, m, d.D, n, scale, dP, kBlock, k, ld, 1.0f, dq, ld);
            gemm(Trans::yes, Trans::no, n, d.D, m, scale, dP, kBlock, q, ld, 1.0f, dk, ld);
          }
        }
      }
    }
}

}  // namespace megatrain::cpu
