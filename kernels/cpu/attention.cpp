// Causal attention on CPU, block-wise with an online softmax (FlashAttention-2, Dao 2023,
// Algorithms 1 and 2): a query block walks the key blocks up to the diagonal keeping a running
// max m, normaliser l and output accumulator, so no T×T matrix is ever held; memory is O(T).
// Backward recomputes the probabilities from the saved log-sum-exp. Block products go through
// gemm (kernels/cpu/gemm.h) with strided views straight into the fused qkv buffer (no transposes).
// Grouped-query attention: query head h reads kv head h / (H / Hkv). Backward runs one task per
// (batch, kv head) so the dK/dV sums over the heads of a group have a fixed order.
// Written once for a block: query rows of one tensor against key/value rows of another, with the
// causal mask or none (context parallelism's ring, model/ring_attention.h, model/ulysses_attention.h); the packed op is the
// block of a sequence against itself. Document boundaries (a packed sequence of several documents,
// data.reset_attention_mask) come as each query row's first visible key: keys before it are masked
// and key blocks before every row of a query block are skipped, forward and backward.
// q/k/v, the output and dqkv are float32 or bf16 (kernels/cpu/bf16.h); the softmax, its statistics
// and every block product's sums are float32 either way. [Note: bf16 block products] In the bf16 op
// every block product multiplies bf16 values, as FlashAttention does on a GPU: q, k and v as they
// are, and the probabilities P, the output gradient dO and the score gradient dS rounded to bf16
// first. Where oneDNN has a native bf16 matmul (kernels/cpu/gemm.h) the products read the bf16 bits
// (q/k/v straight from the fused buffer), 1.2–2× as fast as the float32 GEMM per call; elsewhere
// the same bf16 values, widened to float32, go through the float32 GEMM — the same products either
// way. bf16 gradients accumulate in a float32 buffer of the task's heads, rounded once into dqkv at
// the end.
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

// Query and key rows per block. A block product is one small GEMM call with a fixed cost of a few
// microseconds: at the 124M shape (T 1024, D 64) blocks of 128 rows ran one layer's attention
// forward + backward in 60 ms (bf16) and 82 ms (float32) on a 1-thread AVX512-BF16 CPU, against 96
// and 114 ms with 64 rows and 64 and 92 ms with 256 (more of each diagonal block masked).
constexpr int kBlock = 128;
constexpr int kMaxHeadDim = 256;

// n rows of D float32 values, ld apart.
struct Rows {
  const float* p;
  int64_t ld;
};

// A block product's operand: float32 rows, or bf16 bits (`bits`) for the native bf16 GEMM.
struct Operand {
  const void* p;
  int64_t ld;
  bool bits;
};

// C = α·op(A)·op(B) + β·C on two operands of the same kind (ldc apart).
void product(Trans ta, Trans tb, int M, int N, int K, float alpha, Operand a, Operand b, float beta, float* C,
             int64_t ldc) {
  if (a.bits)
    gemm_bf16(ta, tb, M, N, K, alpha, static_cast<const uint16_t*>(a.p), a.ld, static_cast<const uint16_t*>(b.p), b.ld,
              beta, C, ldc);
  else
    gemm(ta, tb, M, N, K, alpha, static_cast<const float*>(a.p), a.ld, static_cast<const float*>(b.p), b.ld, beta, C,
         ldc);
}

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

// A thread's float32 buffers for widened blocks and, in bf16 backward, the gradient accumulator;
// and for the bf16 roundings of P, dO and dS, as bits (native) or as float32 values.
struct Widened {
  std::vector<float> q, k, v, o, grad, p, dout, ds;
  std::vector<uint16_t> p_bits, dout_bits, ds_bits;
};
Widened& widened(int D) {
  thread_local Widened w;
  const auto block = static_cast<size_t>(kBlock) * static_cast<size_t>(std::max(D, kBlock));
  for (std::vector<float>* b : {&w.q, &w.k, &w.v, &w.o, &w.p, &w.dout, &w.ds})
    if (b->size() < block) b->resize(block);
  for (std::vector<uint16_t>* b : {&w.p_bits, &w.dout_bits, &w.ds_bits})
    if (b->size() < block) b->resize(block);
  return w;
}

// n rows of D of q, k or v as a product's operand: float32 as they are; bf16 as they are where the
// GEMM is native (`bits`), else widened into buf.
Operand input(const float* src, int64_t ld, int, int, float*, bool) { return {src, ld, false}; }
Operand input(const bf16* src, int64_t ld, int n, int D, float* buf, bool bits) {
  if (bits) return {src, ld, true};
  const Rows r = rows_f32(src, ld, n, D, buf);
  return {r.p, r.ld, false};
}

// rows × cols of x (ld apart) as a product's operand of the op on T: float32 x itself; for bf16,
// x rounded to bf16, as bits into `bits` or as float32 values into `values` (cols apart).
template <typename T>
Operand rounded(const float* x, int rows, int cols, int64_t ld, float* values, uint16_t* bits, bool native) {
  if constexpr (std::is_same_v<T, float>) {
    return {x, ld, false};
  } else {
    for (int r = 0; r < rows; ++r) {
      const float* src = x + r * ld;
      if (native) {
#pragma omp simd
        for (int c = 0; c < cols; ++c) bits[r * cols + c] = float_to_bf16(src[c]);
      } else {
#pragma omp simd
        for (int c = 0; c < cols; ++c) values[r * cols + c] = bf16_to_float(float_to_bf16(src[c]));
      }
    }
    return native ? Operand{bits, cols, true} : Operand{values, cols, false};
  }
}

// Whether the op on T multiplies bf16 bits natively.
template <typename T>
bool native_bits() {
  return std::is_same_v<T, bf16> && native_bf16_gemm();
}

// The first visible key (document boundaries) of the query rows of a block from row i0 on, as a
// key row of the block; none without boundaries (every key from 0).
struct FirstKeys {
  const int32_t* p = nullptr;  // at row i0
  int base = 0;                // the block's first key row in first_key's numbering
  FirstKeys(const AttnBlock& d, int b, int i0)
      : p(d.first_key ? d.first_key + b * d.first_ld + i0 : nullptr), base(d.first_base) {}
  int at(int r) const { return p ? p[r] - base : 0; }
  int min(int m) const { return p ? *std::min_element(p, p + m) - base : 0; }
};

// S = scale · Q Kᵀ for rows [i0, i0+m) and keys [j0, j0+n); causal: the mask key > query → −inf;
// with document boundaries also key < the row's first visible key → −inf.
void scores(float* S, Operand q, Operand k, int m, int n, int D, float scale, int i0, int j0, bool causal,
            const FirstKeys& first) {
  constexpr float kHidden = -std::numeric_limits<float>::infinity();
  product(Trans::no, Trans::yes, m, n, D, scale, q, k, 0.0f, S, kBlock);
  if (causal && j0 + n - 1 > i0) {
    for (int r = 0; r < m; ++r)
      for (int c = std::max(0, i0 + r - j0 + 1); c < n; ++c) S[r * kBlock + c] = kHidden;
  }
  if (first.p)
    for (int r = 0; r < m; ++r)
      for (int c = 0, end = std::min(n, first.at(r) - j0); c < end; ++c) S[r * kBlock + c] = kHidden;
}

template <typename T>
void forward(AttnView<T> out, float* lse, AttnView<const T> qv, AttnView<const T> kv, AttnView<const T> vv,
             const AttnBlock& d) {
  MT_CHECK(d.D <= kMaxHeadDim, "head_dim {} exceeds the CPU attention limit {}", d.D, kMaxHeadDim);
  MT_CHECK(!d.causal || d.Tq == d.Tk, "a causal block needs as many query rows as key rows, got {} and {}", d.Tq,
           d.Tk);
  const int group = d.H / d.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int nq = (d.Tq + kBlock - 1) / kBlock;
  const bool bits = native_bits<T>();
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.H; ++h)
      for (int qb = 0; qb < nq; ++qb) {
        alignas(64) float S[kBlock * kBlock];
        alignas(64) float O[kBlock * kMaxHeadDim];
        float m_run[kBlock], l_run[kBlock];
        Widened& w = widened(d.D);
        const int i0 = qb * kBlock, m = std::min(kBlock, d.Tq - i0);
        const int kvh = h / group;
        const Operand q = input(qv.at(b, i0, h, d.D), qv.ld, m, d.D, w.q.data(), bits);
        std::fill(O, O + m * d.D, 0.0f);
        std::fill(m_run, m_run + m, -std::numeric_limits<float>::infinity());
        std::fill(l_run, l_run + m, 0.0f);
        const int j_end = d.causal ? i0 + m : d.Tk;
        const FirstKeys first(d, b, i0);
        // Key blocks before every row's document are skipped (document boundaries: the work falls
        // with the documents' length).
        for (int j0 = std::max(0, first.min(m)) / kBlock * kBlock; j0 < j_end; j0 += kBlock) {
          const int n = std::min(kBlock, d.Tk - j0);
          const Operand k = input(kv.at(b, j0, kvh, d.D), kv.ld, n, d.D, w.k.data(), bits);
          const Operand v = input(vv.at(b, j0, kvh, d.D), vv.ld, n, d.D, w.v.data(), bits);
          scores(S, q, k, m, n, d.D, scale, i0, j0, d.causal, first);
          for (int r = 0; r < m; ++r) {
            float* s = S + r * kBlock;
            float mx = m_run[r];
            for (int c = 0; c < n; ++c) mx = std::max(mx, s[c]);
            if (mx == -std::numeric_limits<float>::infinity()) {  // nothing of the row's seen yet
              std::fill(s, s + n, 0.0f);
              continue;
            }
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
          const Operand p = rounded<T>(S, m, n, kBlock, w.p.data(), w.p_bits.data(), bits);
          product(Trans::no, Trans::no, m, d.D, n, 1.0f, p, v, 1.0f, O, d.D);
        }
        for (int r = 0; r < m; ++r) {
          T* dst = out.at(b, i0 + r, h, d.D);
          // A row that sees no key of the block (its document starts after them): output 0, lse −∞,
          // which the merge with another block's weighs 0.
          const float inv = l_run[r] > 0.0f ? 1.0f / l_run[r] : 0.0f;
          for (int c = 0; c < d.D; ++c) store(dst[c], O[r * d.D + c] * inv);
          lse[(static_cast<int64_t>(b) * d.H + h) * d.lse_ld + i0 + r] = m_run[r] + std::log(l_run[r]);
        }
      }
}

// `+=` into dq, dk and dv (see cpu.h).
template <typename T>
void backward(AttnView<T> dqv, AttnView<T> dkv, AttnView<T> dvv, AttnView<const float> dout, AttnView<const T> qv,
              AttnView<const T> kv, AttnView<const T> vv, AttnView<const T> outv, const float* lse,
              const AttnBlock& d) {
  MT_CHECK(!d.causal || d.Tq == d.Tk, "a causal block needs as many query rows as key rows, got {} and {}", d.Tq,
           d.Tk);
  const int group = d.H / d.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  // float32: the gradients accumulate in place; bf16: in a float32 buffer of the task's group query
  // heads (Tq rows of D each), then k and v (Tk rows each), added into the gradients at the end.
  constexpr bool in_place = std::is_same_v<T, float>;
  const int64_t q_rows = static_cast<int64_t>(d.Tq) * d.D, k_rows = static_cast<int64_t>(d.Tk) * d.D;
  const bool bits = native_bits<T>();
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int b = 0; b < d.B; ++b)
    for (int kvh = 0; kvh < d.Hkv; ++kvh) {
      alignas(64) float P[kBlock * kBlock];
      alignas(64) float dP[kBlock * kBlock];
      float Drow[kBlock];
      Widened& w = widened(d.D);
      if constexpr (!in_place) w.grad.assign(static_cast<size_t>(group * q_rows + 2 * k_rows), 0.0f);
      float* const gq = w.grad.data();
      float* const gk = gq + (in_place ? 0 : group * q_rows);
      float* const gv = gk + (in_place ? 0 : k_rows);
      // Row t of head `head`'s gradient in `dst`, or in the task's buffer `g` (bf16).
      const auto grad_rows = [&](AttnView<T> dst, float* g, int t, int head) -> float* {
        if constexpr (in_place) return dst.at(b, t, head, d.D);
        return g + static_cast<int64_t>(t) * d.D;
      };
      const int64_t qld = in_place ? dqv.ld : d.D, kld = in_place ? dkv.ld : d.D, vld = in_place ? dvv.ld : d.D;
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* lse_h = lse + (static_cast<int64_t>(b) * d.H + h) * d.lse_ld;
        for (int j0 = 0; j0 < d.Tk; j0 += kBlock) {
          const int n = std::min(kBlock, d.Tk - j0);
          const Operand k = input(kv.at(b, j0, kvh, d.D), kv.ld, n, d.D, w.k.data(), bits);
          const Operand v = input(vv.at(b, j0, kvh, d.D), vv.ld, n, d.D, w.v.data(), bits);
          float* dk = grad_rows(dkv, gk, j0, kvh);
          float* dv = grad_rows(dvv, gv, j0, kvh);
          for (int i0 = d.causal ? (j0 / kBlock) * kBlock : 0; i0 < d.Tq; i0 += kBlock) {
            const int m = std::min(kBlock, d.Tq - i0);
            const FirstKeys first(d, b, i0);
            if (first.min(m) >= j0 + n) continue;  // every row's document starts after these keys
            const Operand q = input(qv.at(b, i0, h, d.D), qv.ld, m, d.D, w.q.data(), bits);
            float* dq = grad_rows(dqv, gq + (h - kvh * group) * q_rows, i0, h);
            const Rows o = rows_f32(outv.at(b, i0, h, d.D), outv.ld, m, d.D, w.o.data());
            const float* dob = dout.at(b, i0, h, d.D);
            // 1. P = exp(S − lse), recomputed.
            scores(P, q, k, m, n, d.D, scale, i0, j0, d.causal, first);
            for (int r = 0; r < m; ++r) {
              const float l = lse_h[i0 + r];
              float* p = P + r * kBlock;
#pragma omp simd
              for (int c = 0; c < n; ++c) p[c] = fast_exp(p[c] - l);
              float acc = 0.0f;
              for (int c = 0; c < d.D; ++c) acc += dob[r * dout.ld + c] * o.p[r * o.ld + c];
              Drow[r] = acc;  // D_i = rowsum(dO ∘ O)
            }
            // 2. dV += Pᵀ dO.
            const Operand p = rounded<T>(P, m, n, kBlock, w.p.data(), w.p_bits.data(), bits);
            const Operand g = rounded<T>(dob, m, d.D, dout.ld, w.dout.data(), w.dout_bits.data(), bits);
            product(Trans::yes, Trans::no, n, d.D, m, 1.0f, p, g, 1.0f, dv, vld);
            // 3. dP = dO Vᵀ;  dS = P ∘ (dP − D).
            product(Trans::no, Trans::yes, m, n, d.D, 1.0f, g, v, 0.0f, dP, kBlock);
            for (int r = 0; r < m; ++r)
              for (int c = 0; c < n; ++c) dP[r * kBlock + c] = P[r * kBlock + c] * (dP[r * kBlock + c] - Drow[r]);
            // 4. dQ += scale · dS K;  dK += scale · dSᵀ Q.
            const Operand ds = rounded<T>(dP, m, n, kBlock, w.ds.data(), w.ds_bits.data(), bits);
            product(Trans::no, Trans::no, m, d.D, n, scale, ds, k, 1.0f, dq, qld);
            product(Trans::yes, Trans::no, n, d.D, m, scale, ds, q, 1.0f, dk, kld);
          }
        }
      }
      if constexpr (!in_place) {
        const auto add_rows = [&](AttnView<T> dst, int head, const float* g, int rows) {
          for (int t = 0; t < rows; ++t) {
            T* r = dst.at(b, t, head, d.D);
            const float* gr = g + static_cast<int64_t>(t) * d.D;
#pragma omp simd
            for (int c = 0; c < d.D; ++c) store(r[c], load(r[c]) + gr[c]);
          }
        };
        for (int slot = 0; slot < group; ++slot) add_rows(dqv, kvh * group + slot, gq + slot * q_rows, d.Tq);
        add_rows(dkv, kvh, gk, d.Tk);
        add_rows(dvv, kvh, gv, d.Tk);
      }
    }
}

AttnBlock whole(const AttnDims& d) { return {d.B, d.T, d.T, d.H, d.Hkv, d.D, true, d.T, d.first_key, d.T, 0}; }

template <typename T>
void packed_forward(T* out, float* lse, const T* qkv, const AttnDims& d) {
  forward<T>(output_rows(out, d.T, d.H, d.D), lse, packed_heads(qkv, d.T, d.H, d.Hkv, d.D, 0),
             packed_heads(qkv, d.T, d.H, d.Hkv, d.D, d.H), packed_heads(qkv, d.T, d.H, d.Hkv, d.D, d.H + d.Hkv),
             whole(d));
}

template <typename T>
void packed_backward(T* dqkv, const float* dout, const T* qkv, const T* out, const float* lse, const AttnDims& d) {
  std::memset(static_cast<void*>(dqkv), 0,
              sizeof(T) * static_cast<size_t>(d.B) * d.T * static_cast<size_t>((d.H + 2 * d.Hkv) * d.D));
  const auto heads = [&](auto* p, int first) { return packed_heads(p, d.T, d.H, d.Hkv, d.D, first); };
  backward<T>(heads(dqkv, 0), heads(dqkv, d.H), heads(dqkv, d.H + d.Hkv), output_rows(dout, d.T, d.H, d.D),
              heads(qkv, 0), heads(qkv, d.H), heads(qkv, d.H + d.Hkv), output_rows(out, d.T, d.H, d.D), lse,
              whole(d));
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d) { packed_forward(out, lse, qkv, d); }
void attention_forward(bf16* out, float* lse, const bf16* qkv, const AttnDims& d) { packed_forward(out, lse, qkv, d); }

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d) {
  packed_backward(dqkv, dout, qkv, out, lse, d);
}
void attention_backward(bf16* dqkv, const float* dout, const bf16* qkv, const bf16* out, const float* lse,
                        const AttnDims& d) {
  packed_backward(dqkv, dout, qkv, out, lse, d);
}

void attention_block_forward(AttnView<float> out, float* lse, AttnView<const float> q, AttnView<const float> k,
                             AttnView<const float> v, const AttnBlock& d) {
  forward(out, lse, q, k, v, d);
}

void attention_block_backward(AttnView<float> dq, AttnView<float> dk, AttnView<float> dv, AttnView<const float> dout,
                              AttnView<const float> q, AttnView<const float> k, AttnView<const float> v,
                              AttnView<const float> out, const float* lse, const AttnBlock& d) {
  backward(dq, dk, dv, dout, q, k, v, out, lse, d);
}

void attention_merge(AttnView<float> out, float* lse, AttnView<const float> part, const float* part_lse,
                     const AttnBlock& d) {
#pragma omp parallel for collapse(2)
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.H; ++h) {
      const int64_t l0 = (static_cast<int64_t>(b) * d.H + h) * d.lse_ld;
      for (int t = 0; t < d.Tq; ++t) {
        const float a = lse[l0 + t], c = part_lse[l0 + t], mx = std::max(a, c);
        const float wa = std::exp(a - mx), wc = std::exp(c - mx), inv = 1.0f / (wa + wc);
        float* o = out.at(b, t, h, d.D);
        const float* p = part.at(b, t, h, d.D);
        for (int e = 0; e < d.D; ++e) o[e] = (wa * o[e] + wc * p[e]) * inv;
        lse[l0 + t] = mx + std::log(wa + wc);
      }
    }
}

void attention_rows_copy(AttnView<float> dst, AttnView<const float> src, int B, int n, int64_t width,
                         bool accumulate) {
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < n; ++t) {
      float* o = dst.at(b, t, 0, 0);
      const float* i = src.at(b, t, 0, 0);
      if (accumulate) {
        for (int64_t c = 0; c < width; ++c) o[c] += i[c];
      } else {
        std::copy(i, i + width, o);
      }
    }
}

}  // namespace megatrain::cpu
