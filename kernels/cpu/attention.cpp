// Causal attention on CPU, block-wise with an online softmax (FlashAttention-2, Dao 2023,
// Algorithms 1 and 2): a query block walks the key blocks up to the diagonal keeping a running
// max m, normaliser l and output accumulator, so no T×T matrix is ever held; memory is O(T).
// Backward recomputes the probabilities from the saved log-sum-exp. Block products go through
// gemm (kernels/cpu/gemm.h) with strided views straight into the fused qkv buffer (no transposes).
// Grouped-query attention: query head h reads kv head h / (H / Hkv). Backward runs one task per
// (batch, kv head) so the dK/dV sums over the heads of a group have a fixed order.
// q/k/v, the output and dqkv are float32 or bf16 (kernels/cpu/bf16.h); the softmax, its statistics
// and every block product are float32 either way. bf16 blocks are widened into the task's float32
// buffers as they are read, and bf16 gradients accumulate in a float32 buffer of the task's heads,
// rounded once into dqkv at the end; so the bf16 op is the float32 op on the widened inputs with its
// outputs rounded.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vec.h"

namespace megatrain::cpu {
namespace {

constexpr int kBlock = 64;
constexpr int kMaxHeadDim = 256;

struct Layout {
  int64_t row;  // values per token in qkv
  template <typename F>
  F* q(F* base, int b, int T, int t, int h, int D) const {
    return base + (static_cast<int64_t>(b) * T + t) * row + static_cast<int64_t>(h) * D;
  }
};

// n rows of D float32 values, ld apart.
struct Rows {
  const float* p;
  int64_t ld;
};

// A block of n rows × D, ld apart, as float32: the block itself, or widened into buf (ld D).
Rows rows_f32(const float* src, int64_t ld, int n, int D, float* buf) { return {src, ld}; }
Rows rows_f32(const bf16* src, int64_t ld, int n, int D, float* buf) {
  for (int r = 0; r < n; ++r) {
    const bf16* s = src + r * ld;
    float* d = buf + static_cast<int64_t>(r) * D;
#pragma omp simd
    for (int c = 0; c < D; ++c) d[c] = load(s[c]);
  }
  return {buf, D};
}

// A thread's float32 buffers for widened blocks and, in bf16 backward, the gradient accumulator.
struct Widened {
  std::vector<float> q, k, v, o, grad;
};
Widened& widened(int D) {
  thread_local Widened w;
  const auto block = static_cast<size_t>(kBlock) * static_cast<size_t>(D);
  for (std::vector<float>* b : {&w.q, &w.k, &w.v, &w.o})
    if (b->size() < block) b->resize(block);
  return w;
}

// S = scale · Q Kᵀ for rows [i0, i0+m) and keys [j0, j0+n), with the causal mask (key > query → −inf).
void scores(float* S, Rows q, Rows k, int m, int n, int D, float scale, int i0, int j0) {
  gemm(Trans::no, Trans::yes, m, n, D, scale, q.p, q.ld, k.p, k.ld, 0.0f, S, kBlock);
  if (j0 + n - 1 > i0) {
    for (int r = 0; r < m; ++r)
      for (int c = std::max(0, i0 + r - j0 + 1); c < n; ++c) S[r * kBlock + c] = -std::numeric_limits<float>::infinity();
  }
}

template <typename T>
void forward(T* out, float* lse, const T* qkv, const AttnDims& d) {
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
        Widened& w = widened(d.D);
        const int i0 = qb * kBlock, m = std::min(kBlock, d.T - i0);
        const int kvh = h / group;
        const Rows q = rows_f32(L.q(qkv, b, d.T, i0, h, d.D), L.row, m, d.D, w.q.data());
        std::fill(O, O + m * d.D, 0.0f);
        std::fill(m_run, m_run + m, -std::numeric_limits<float>::infinity());
        std::fill(l_run, l_run + m, 0.0f);
        for (int j0 = 0; j0 < i0 + m; j0 += kBlock) {
          const int n = std::min(kBlock, d.T - j0);
          const Rows k = rows_f32(L.q(qkv, b, d.T, j0, d.H + kvh, d.D), L.row, n, d.D, w.k.data());
          const Rows v = rows_f32(L.q(qkv, b, d.T, j0, d.H + d.Hkv + kvh, d.D), L.row, n, d.D, w.v.data());
          scores(S, q, k, m, n, d.D, scale, i0, j0);
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
          gemm(Trans::no, Trans::no, m, d.D, n, 1.0f, S, kBlock, v.p, v.ld, 1.0f, O, d.D);
        }
        for (int r = 0; r < m; ++r) {
          T* dst = out + (static_cast<int64_t>(b) * d.T + i0 + r) * out_row + static_cast<int64_t>(h) * d.D;
          const float inv = 1.0f / l_run[r];
          for (int c = 0; c < d.D; ++c) store(dst[c], O[r * d.D + c] * inv);
          lse[(static_cast<int64_t>(b) * d.H + h) * d.T + i0 + r] = m_run[r] + std::log(l_run[r]);
        }
      }
}

template <typename T>
void backward(T* dqkv, const float* dout, const T* qkv, const T* out, const float* lse, const AttnDims& d) {
  const Layout L{static_cast<int64_t>(d.H + 2 * d.Hkv) * d.D};
  const int group = d.H / d.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int64_t out_row = static_cast<int64_t>(d.H) * d.D;
  const int64_t ldo = out_row;
  // float32: the gradients accumulate in dqkv itself; bf16: in a float32 buffer of the task's
  // group + 2 heads (its query heads, then k, then v), T rows of D each, rounded into dqkv at the end.
  constexpr bool in_place = std::is_same_v<T, float>;
  const int64_t gld = in_place ? L.row : d.D;
  if constexpr (in_place) std::memset(dqkv, 0, sizeof(float) * static_cast<size_t>(d.B) * d.T * static_cast<size_t>(L.row));
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < d.B; ++b)
    for (int kvh = 0; kvh < d.Hkv; ++kvh) {
      alignas(64) float P[kBlock * kBlock];
      alignas(64) float dP[kBlock * kBlock];
      float Drow[kBlock];
      Widened& w = widened(d.D);
      const int64_t head_rows = static_cast<int64_t>(d.T) * d.D;
      if constexpr (!in_place) w.grad.assign(static_cast<size_t>((group + 2) * head_rows), 0.0f);
      // Row t of the gradient of qkv head `head`, the task's head number `slot`.
      const auto grad_row = [&](int head, int slot, int t) -> float* {
        if constexpr (in_place) return L.q(dqkv, b, d.T, t, head, d.D);
        return w.grad.data() + slot * head_rows + static_cast<int64_t>(t) * d.D;
      };
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* lse_h = lse + (static_cast<int64_t>(b) * d.H + h) * d.T;
        for (int j0 = 0; j0 < d.T; j0 += kBlock) {
          const int n = std::min(kBlock, d.T - j0);
          const Rows k = rows_f32(L.q(qkv, b, d.T, j0, d.H + kvh, d.D), L.row, n, d.D, w.k.data());
          const Rows v = rows_f32(L.q(qkv, b, d.T, j0, d.H + d.Hkv + kvh, d.D), L.row, n, d.D, w.v.data());
          float* dk = grad_row(d.H + kvh, group, j0);
          float* dv = grad_row(d.H + d.Hkv + kvh, group + 1, j0);
          for (int i0 = (j0 / kBlock) * kBlock; i0 < d.T; i0 += kBlock) {
            const int m = std::min(kBlock, d.T - i0);
            const Rows q = rows_f32(L.q(qkv, b, d.T, i0, h, d.D), L.row, m, d.D, w.q.data());
            float* dq = grad_row(h, h - kvh * group, i0);
            const int64_t orow = (static_cast<int64_t>(b) * d.T + i0) * out_row + static_cast<int64_t>(h) * d.D;
            const Rows o = rows_f32(out + orow, out_row, m, d.D, w.o.data());
            const float* dob = dout + orow;
            // 1. P = exp(S − lse), recomputed.
            scores(P, q, k, m, n, d.D, scale, i0, j0);
            for (int r = 0; r < m; ++r) {
              const float l = lse_h[i0 + r];
              float* p = P + r * kBlock;
#pragma omp simd
              for (int c = 0; c < n; ++c) p[c] = fast_exp(p[c] - l);
              float acc = 0.0f;
              for (int c = 0; c < d.D; ++c) acc += dob[r * out_row + c] * o.p[r * o.ld + c];
              Drow[r] = acc;  // D_i = rowsum(dO ∘ O)
            }
            // 2. dV += Pᵀ dO.
            gemm(Trans::yes, Trans::no, n, d.D, m, 1.0f, P, kBlock, dob, ldo, 1.0f, dv, gld);
            // 3. dP = dO Vᵀ;  dS = P ∘ (dP − D).
            gemm(Trans::no, Trans::yes, m, n, d.D, 1.0f, dob, ldo, v.p, v.ld, 0.0f, dP, kBlock);
            for (int r = 0; r < m; ++r)
              for (int c = 0; c < n; ++c) dP[r * kBlock + c] = P[r * kBlock + c] * (dP[r * kBlock + c] - Drow[r]);
            // 4. dQ += scale · dS K;  dK += scale · dSᵀ Q.
            gemm(Trans::no, Trans::no, m, d.D, n, scale, dP, kBlock, k.p, k.ld, 1.0f, dq, gld);
            gemm(Trans::yes, Trans::no, n, d.D, m, scale, dP, kBlock, q.p, q.ld, 1.0f, dk, gld);
          }
        }
      }
      if constexpr (!in_place) {
        for (int slot = 0; slot < group + 2; ++slot) {
          const int head = slot < group ? kvh * group + slot : slot == group ? d.H + kvh : d.H + d.Hkv + kvh;
          for (int t = 0; t < d.T; ++t) {
            const float* g = grad_row(head, slot, t);
            T* dst = L.q(dqkv, b, d.T, t, head, d.D);
#pragma omp simd
            for (int c = 0; c < d.D; ++c) store(dst[c], g[c]);
          }
        }
      }
    }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d) { forward(out, lse, qkv, d); }
void attention_forward(bf16* out, float* lse, const bf16* qkv, const AttnDims& d) { forward(out, lse, qkv, d); }

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d) {
  backward(dqkv, dout, qkv, out, lse, d);
}
void attention_backward(bf16* dqkv, const float* dout, const bf16* qkv, const bf16* out, const float* lse,
                        const AttnDims& d) {
  backward(dqkv, dout, qkv, out, lse, d);
}

}  // namespace megatrain::cpu
