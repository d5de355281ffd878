// Causal attention, forward and backward, tiled with an online softmax (FlashAttention-2, Dao 2023,
// Algorithms 1 and 2), float32 on the CUDA cores. Same semantics as kernels/cpu/attention.cpp:
// qkv rows are [q heads | k heads | v heads], query head h reads kv head h / (H / Hkv), and the
// forward saves the log-sum-exp of each query row for the backward, which recomputes P from it.
//
// Every kernel runs 256 threads as a 16 × 16 grid: tx = threadIdx.x % 16 picks columns, ty the
// rows, so a thread owns rows ty + 16·i and columns tx + 16·j of each tile product, and the 16
// threads sharing a row are one half-warp (row reductions are 4 butterfly shuffles). Q, K, V and dO
// tiles sit in shared memory with D rounded up to 4 (zero padded) and a row stride ld ≡ 4 (mod 8)
// floats, so the score products read 4 columns at once (float4) and the 8 rows a quarter-warp
// reads fall in 8 different bank groups. Tile rows at or past T are loaded as zeros: masked
// probabilities are exactly 0 and 0 · (unwritten shared memory) could be NaN.
//
// Written for a block: query rows of one operand against key/value rows of others (strided views,
// kernels/attention_block.h), causal or unmasked, the backward writing the packed op's dqkv or
// adding into a block's dq, dk, dv (context parallelism's ring, model/ring_attention.h, model/ulysses_attention.h).
//
// Determinism: no atomics. The forward and dQ blocks each own their output rows; a dK/dV block
// owns a (batch, kv head, key tile) and walks its group's query heads, then the query tiles, in a
// fixed order. Reruns are bitwise identical.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/attention_block.h"
#include "kernels/cuda/common.cuh"

#ifdef __CUDACC__
#define MT_UNROLL _Pragma("unroll")
#else
#define MT_UNROLL
#endif

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kSide = 16;  // the thread grid is kSide × kSide
constexpr int kThreads = kSide * kSide;
constexpr int kMaxHeadDim = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A block's sizes (kernels/attention_block.h) and whether the backward adds into dq, dk and dv
// (the block op) or writes them (the packed op).
struct Dims {
  int B, Tq, Tk, H, Hkv, D;
  bool causal;
  int64_t lse_ld;
  bool accumulate;
};
using CRows = AttnView<const float>;
using Rows = AttnView<float>;

__device__ inline int imin(int a, int b) { return a < b ? a : b; }

// Reductions over the 16 threads of a row (a half-warp); every one of them gets the result.
__device__ inline float row_max(float v) {
  for (int offset = kSide / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}
__device__ inline float row_sum(float v) {
  for (int offset = kSide / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Row length of the tiles' products (D padded to a multiple of 4) and their shared-memory stride.
__host__ __device__ inline int padded_dim(int D) { return (D + 3) / 4 * 4; }
__host__ __device__ inline int tile_stride(int D) {
  return padded_dim(D) / 4 % 2 == 1 ? padded_dim(D) : padded_dim(D) + 4;
}

// dst (n, ld) in shared memory = n rows of D floats at src, `stride` floats apart, zero padded to
// padded_dim(D); rows at or past `valid` are zeros. A warp copies a row at a time, its lanes along
// the row (coalesced).
__device__ inline void load_tile(float* dst, int n, int ld, const float* src, int64_t stride, int valid, int D) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize, warp = static_cast<int>(threadIdx.x) / warpSize;
  const int width = padded_dim(D);
  for (int r = warp; r < n; r += kThreads / warpSize)
    for (int c = lane; c < width; c += warpSize) dst[r * ld + c] = r < valid && c < D ? src[r * stride + c] : 0.0f;
}

// Whether query row qi sees key kj: inside the block and, causal, not after it.
__device__ inline bool visible(const Dims& d, int qi, int kj) { return kj < d.Tk && (!d.causal || kj <= qi); }
// out = v, or out += v for a block's gradients.
__device__ inline void put(float& out, float v, bool accumulate) { out = accumulate ? out + v : v; }

// acc[i][j] += Σ A[ty + 16i][k + e] · B[tx + 16j][k + e] over e < 4, a float4 load per row.
template <int kRows, int kCols>
__device__ inline void tile_dot4(float (&acc)[kRows][kCols], const float* a, const float* b, int ld, int k) {
  const int tx = static_cast<int>(threadIdx.x) % kSide, ty = static_cast<int>(threadIdx.x) / kSide;
  float4 av[kRows], bv[kCols];
  MT_UNROLL for (int i = 0; i < kRows; ++i) av[i] = *reinterpret_cast<const float4*>(a + (ty + kSide * i) * ld + k);
  MT_UNROLL for (int j = 0; j < kCols; ++j) bv[j] = *reinterpret_cast<const float4*>(b + (tx + kSide * j) * ld + k);
  MT_UNROLL for (int i = 0; i < kRows; ++i) MT_UNROLL for (int j = 0; j < kCols; ++j) {
    acc[i][j] += av[i].x * bv[j].x;
    acc[i][j] += av[i].y * bv[j].y;
    acc[i][j] += av[i].z * bv[j].z;
    acc[i][j] += av[i].w * bv[j].w;
  }
}
// acc = A Bᵀ over the padded row (the scores Q Kᵀ), and with kTwo acc2 = A2 B2ᵀ in the same loop
// (the backward's dP = dO Vᵀ).
template <int kRows, int kCols, bool kTwo>
__device__ inline void tile_dot(float (&acc)[kRows][kCols], float (&acc2)[kRows][kCols], const float* a,
                                const float* b, const float* a2, const float* b2, int ld, int D) {
  for (int k = 0; k < padded_dim(D); k += 4) {
    tile_dot4<kRows, kCols>(acc, a, b, ld, k);
    if constexpr (kTwo) tile_dot4<kRows, kCols>(acc2, a2, b2, ld, k);
  }
}

// The forward: a block per (query tile, head, batch); K/V tiles from 0 to the diagonal.
// Shared memory: Q (kBr, ld), V (kBc, ld), and K (kBc, ld) whose space P (kBr, kBc + 1) takes over
// once the scores are computed (at D = 128 two blocks then fit in an H100 SM).
template <int kBr, int kBc, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Rows out, float* lse, CRows q, CRows k, CRows v, Dims d, float scale_log2) {
  constexpr int kRows = kBr / kSide, kCols = kBc / kSide, kDs = kMaxD / kSide, ldp = kBc + 1;
  MT_DYNAMIC_SHARED(float, smem);
  const int ld = tile_stride(d.D);
  float* Qs = smem;
  float* Vs = Qs + kBr * ld;
  float* Ks = Vs + kBc * ld;
  float* Ps = Ks;
  const int tx = static_cast<int>(threadIdx.x) % kSide, ty = static_cast<int>(threadIdx.x) / kSide;
  const int i0 = (static_cast<int>(gridDim.x - blockIdx.x) - 1) * kBr;  // the longest rows start first
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), kvh = h / (d.H / d.Hkv);
  load_tile(Qs, kBr, ld, q.at(b, i0, h, d.D), q.ld, d.Tq - i0, d.D);

  // Running max m (log2 units, scaled), this thread's part of the normaliser l, output accumulator.
  // Key tile 0 holds key 0, which every row sees, so m is finite from the first tile on.
  float o[kRows][kDs] = {}, m[kRows], l[kRows];
  MT_UNROLL for (int i = 0; i < kRows; ++i) m[i] = -INFINITY, l[i] = 0.0f;
  const int keys_end = d.causal ? imin(i0 + kBr, d.Tk) : d.Tk;  // no row of this tile sees a key past this
  for (int j0 = 0; j0 < keys_end; j0 += kBc) {
    __syncthreads();  // the previous tile's K, V and P are read
    load_tile(Ks, kBc, ld, k.at(b, j0, kvh, d.D), k.ld, d.Tk - j0, d.D);
    load_tile(Vs, kBc, ld, v.at(b, j0, kvh, d.D), v.ld, d.Tk - j0, d.D);
    __syncthreads();
    float s[kRows][kCols] = {};
    tile_dot<kRows, kCols, false>(s, s, Qs, Ks, nullptr, nullptr, ld, d.D);
    MT_UNROLL for (int i = 0; i < kRows; ++i) {
      const int qi = i0 + ty + kSide * i;
      float mx = m[i];
      MT_UNROLL for (int j = 0; j < kCols; ++j) {
        s[i][j] = visible(d, qi, j0 + tx + kSide * j) ? s[i][j] * scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      mx = row_max(mx);
      const float corr = exp2f(m[i] - mx);
      m[i] = mx;
      l[i] *= corr;
      MT_UNROLL for (int j = 0; j < kCols; ++j) {
        s[i][j] = exp2f(s[i][j] - mx);
        l[i] += s[i][j];
      }
      MT_UNROLL for (int c = 0; c < kDs; ++c) o[i][c] *= corr;
    }
    __syncthreads();  // every thread's scores are done with K: P takes its space
    MT_UNROLL for (int i = 0; i < kRows; ++i) MT_UNROLL for (int j = 0; j < kCols; ++j)
      Ps[(ty + kSide * i) * ldp + tx + kSide * j] = s[i][j];
    __syncthreads();
    // O += P V, keys past keys_end have P = 0 in every row that is written.
    const int n = imin(kBc, keys_end - j0);
    for (int k = 0; k < n; ++k) {
      float p[kRows], v[kDs];
      MT_UNROLL for (int i = 0; i < kRows; ++i) p[i] = Ps[(ty + kSide * i) * ldp + k];
      MT_UNROLL for (int c = 0; c < kDs; ++c) v[c] = tx + kSide * c < d.D ? Vs[k * ld + tx + kSide * c] : 0.0f;
      MT_UNROLL for (int i = 0; i < kRows; ++i) MT_UNROLL for (int c = 0; c < kDs; ++c) o[i][c] += p[i] * v[c];
    }
  }
  MT_UNROLL for (int i = 0; i < kRows; ++i) {
    const int qi = i0 + ty + kSide * i;
    const float total = row_sum(l[i]);
    if (qi >= d.Tq) continue;
    float* dst = out.at(b, qi, h, d.D);
    const float inv = 1.0f / total;
    MT_UNROLL for (int c = 0; c < kDs; ++c) if (tx + kSide * c < d.D) dst[tx + kSide * c] = o[i][c] * inv;
    if (tx == 0) lse[(static_cast<int64_t>(b) * d.H + h) * d.lse_ld + qi] = (m[i] + log2f(total)) * kLn2;
  }
}

// delta[b, h, t] = Σ_d dO · O over query row t of head h (FlashAttention-2's D_i): a warp per
// (b, t, h), which is a contiguous row of D floats in out and dout.
constexpr int kDeltaWarps = 8;
__global__ void attention_delta_kernel(float* delta, CRows dout, CRows out, Dims d) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kDeltaWarps + threadIdx.x / warpSize;
  if (n >= static_cast<int64_t>(d.B) * d.Tq * d.H) return;
  const int64_t bt = n / d.H, b = bt / d.Tq, t = bt % d.Tq, h = n % d.H;
  const float* g = dout.at(static_cast<int>(b), static_cast<int>(t), static_cast<int>(h), d.D);
  const float* o = out.at(static_cast<int>(b), static_cast<int>(t), static_cast<int>(h), d.D);
  float acc = 0.0f;
  for (int c = lane; c < d.D; c += warpSize) acc += g[c] * o[c];
  acc = warp_sum(acc);
  if (lane == 0) delta[(b * d.H + h) * d.Tq + t] = acc;
}

// The score and probability tile the backward passes share: for this thread's (row, key) pairs,
// P = exp(S − lse) (0 where masked or outside the block) and dS = P ∘ (dP − delta), into Ps and dSs
// (rows of ldp) where given. s and dp hold the raw Q Kᵀ and dO Vᵀ products on entry.
template <int kRows, int kCols>
__device__ inline void probabilities(float* Ps, float* dSs, int ldp, const float (&s)[kRows][kCols],
                                     const float (&dp)[kRows][kCols], const float* lse, const float* delta, int i0,
                                     int j0, const Dims& d, float scale_log2) {
  const int tx = static_cast<int>(threadIdx.x) % kSide, ty = static_cast<int>(threadIdx.x) / kSide;
  MT_UNROLL for (int i = 0; i < kRows; ++i) {
    const int r = ty + kSide * i, qi = i0 + r;
    const float lse2 = qi < d.Tq ? lse[qi] * kLog2e : 0.0f, di = qi < d.Tq ? delta[qi] : 0.0f;
    MT_UNROLL for (int j = 0; j < kCols; ++j) {
      const int c = tx + kSide * j;
      const float p = qi < d.Tq && visible(d, qi, j0 + c) ? exp2f(s[i][j] * scale_log2 - lse2) : 0.0f;
      if (Ps) Ps[r * ldp + c] = p;
      dSs[r * ldp + c] = p * (dp[i][j] - di);
    }
  }
}

// dK and dV: a block per (key tile, kv head, batch) holds its K and V tiles and its dK, dV
// accumulators (rows ty + 16·i, columns tx + 16·c) while it walks the query heads of its group and,
// for each, the query tiles from the diagonal on. Shared memory: K, V (kBc, ld), Q, dO (kBr, ld),
// P, dS (kBr, kBc + 1).
template <int kBr, int kBc, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(Rows dkv_k, Rows dkv_v, CRows dout, CRows q, CRows k, CRows v, const float* lse,
                                   const float* delta, Dims d, float scale) {
  constexpr int kRows = kBr / kSide, kCols = kBc / kSide, kDs = kMaxD / kSide, ldp = kBc + 1;
  MT_DYNAMIC_SHARED(float, smem);
  const int ld = tile_stride(d.D);
  float* Ks = smem;
  float* Vs = Ks + kBc * ld;
  float* Qs = Vs + kBc * ld;
  float* dOs = Qs + kBr * ld;
  float* Ps = dOs + kBr * ld;
  float* dSs = Ps + kBr * ldp;
  const int tx = static_cast<int>(threadIdx.x) % kSide, ty = static_cast<int>(threadIdx.x) / kSide;
  const int j0 = static_cast<int>(blockIdx.x) * kBc, kvh = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z), group = d.H / d.Hkv;
  load_tile(Ks, kBc, ld, k.at(b, j0, kvh, d.D), k.ld, d.Tk - j0, d.D);
  load_tile(Vs, kBc, ld, v.at(b, j0, kvh, d.D), v.ld, d.Tk - j0, d.D);
  const float scale_log2 = scale * kLog2e;
  float dk[kCols][kDs] = {}, dv[kCols][kDs] = {};
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* lse_h = lse + (static_cast<int64_t>(b) * d.H + h) * d.lse_ld;
    const float* delta_h = delta + (static_cast<int64_t>(b) * d.H + h) * d.Tq;
    for (int i0 = d.causal ? j0 / kBr * kBr : 0; i0 < d.Tq; i0 += kBr) {
      __syncthreads();  // the previous tile's Q, dO, P and dS are read (and K, V written)
      load_tile(Qs, kBr, ld, q.at(b, i0, h, d.D), q.ld, d.Tq - i0, d.D);
      load_tile(dOs, kBr, ld, dout.at(b, i0, h, d.D), dout.ld, d.Tq - i0, d.D);
      __syncthreads();
      float s[kRows][kCols] = {}, dp[kRows][kCols] = {};
      tile_dot<kRows, kCols, true>(s, dp, Qs, Ks, dOs, Vs, ld, d.D);
      probabilities<kRows, kCols>(Ps, dSs, ldp, s, dp, lse_h, delta_h, i0, j0, d, scale_log2);
      __syncthreads();
      // dV += Pᵀ dO, dK += dSᵀ Q over the tile's rows before Tq (P = dS = 0 in the others).
      const int n = imin(kBr, d.Tq - i0);
      for (int r = 0; r < n; ++r) {
        float p[kCols], ds[kCols], g[kDs], q[kDs];
        MT_UNROLL for (int j = 0; j < kCols; ++j) {
          p[j] = Ps[r * ldp + ty + kSide * j];
          ds[j] = dSs[r * ldp + ty + kSide * j];
        }
        MT_UNROLL for (int c = 0; c < kDs; ++c) {
          const bool in = tx + kSide * c < d.D;
          g[c] = in ? dOs[r * ld + tx + kSide * c] : 0.0f;
          q[c] = in ? Qs[r * ld + tx + kSide * c] : 0.0f;
        }
        MT_UNROLL for (int j = 0; j < kCols; ++j) MT_UNROLL for (int c = 0; c < kDs; ++c) {
          dv[j][c] += p[j] * g[c];
          dk[j][c] += ds[j] * q[c];
        }
      }
    }
  }
  MT_UNROLL for (int j = 0; j < kCols; ++j) {
    const int kj = j0 + ty + kSide * j;
    if (kj >= d.Tk) continue;
    float* dkr = dkv_k.at(b, kj, kvh, d.D);
    float* dvr = dkv_v.at(b, kj, kvh, d.D);
    MT_UNROLL for (int c = 0; c < kDs; ++c) if (tx + kSide * c < d.D) {
      put(dkr[tx + kSide * c], dk[j][c] * scale, d.accumulate);
      put(dvr[tx + kSide * c], dv[j][c], d.accumulate);
    }
  }
}

// dQ: a block per (query tile, head, batch) holds Q, dO and its dQ accumulator while it walks the
// key tiles up to the diagonal. Shared memory: Q, dO (kBr, ld), K, V (kBc, ld), dS (kBr, kBc + 1).
template <int kBr, int kBc, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(Rows dq_rows, CRows dout, CRows q, CRows k, CRows v, const float* lse,
                                 const float* delta, Dims d, float scale) {
  constexpr int kRows = kBr / kSide, kCols = kBc / kSide, kDs = kMaxD / kSide, ldp = kBc + 1;
  MT_DYNAMIC_SHARED(float, smem);
  const int ld = tile_stride(d.D);
  float* Qs = smem;
  float* dOs = Qs + kBr * ld;
  float* Ks = dOs + kBr * ld;
  float* Vs = Ks + kBc * ld;
  float* dSs = Vs + kBc * ld;
  const int tx = static_cast<int>(threadIdx.x) % kSide, ty = static_cast<int>(threadIdx.x) / kSide;
  const int i0 = (static_cast<int>(gridDim.x - blockIdx.x) - 1) * kBr;  // the longest rows start first
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z), kvh = h / (d.H / d.Hkv);
  load_tile(Qs, kBr, ld, q.at(b, i0, h, d.D), q.ld, d.Tq - i0, d.D);
  load_tile(dOs, kBr, ld, dout.at(b, i0, h, d.D), dout.ld, d.Tq - i0, d.D);
  const float* lse_h = lse + (static_cast<int64_t>(b) * d.H + h) * d.lse_ld;
  const float* delta_h = delta + (static_cast<int64_t>(b) * d.H + h) * d.Tq;
  const float scale_log2 = scale * kLog2e;
  float dq[kRows][kDs] = {};
  const int keys_end = d.causal ? imin(i0 + kBr, d.Tk) : d.Tk;
  for (int j0 = 0; j0 < keys_end; j0 += kBc) {
    __syncthreads();  // the previous tile's K and dS are read
    load_tile(Ks, kBc, ld, k.at(b, j0, kvh, d.D), k.ld, d.Tk - j0, d.D);
    load_tile(Vs, kBc, ld, v.at(b, j0, kvh, d.D), v.ld, d.Tk - j0, d.D);
    __syncthreads();
    float s[kRows][kCols] = {}, dp[kRows][kCols] = {};
    tile_dot<kRows, kCols, true>(s, dp, Qs, Ks, dOs, Vs, ld, d.D);
    probabilities<kRows, kCols>(nullptr, dSs, ldp, s, dp, lse_h, delta_h, i0, j0, d, scale_log2);
    __syncthreads();
    // dQ += dS K over the keys before keys_end (dS = 0 past it in every row that is written).
    const int n = imin(kBc, keys_end - j0);
    for (int k = 0; k < n; ++k) {
      float ds[kRows], kv[kDs];
      MT_UNROLL for (int i = 0; i < kRows; ++i) ds[i] = dSs[(ty + kSide * i) * ldp + k];
      MT_UNROLL for (int c = 0; c < kDs; ++c) kv[c] = tx + kSide * c < d.D ? Ks[k * ld + tx + kSide * c] : 0.0f;
      MT_UNROLL for (int i = 0; i < kRows; ++i) MT_UNROLL for (int c = 0; c < kDs; ++c) dq[i][c] += ds[i] * kv[c];
    }
  }
  MT_UNROLL for (int i = 0; i < kRows; ++i) {
    const int qi = i0 + ty + kSide * i;
    if (qi >= d.Tq) continue;
    float* dqr = dq_rows.at(b, qi, h, d.D);
    MT_UNROLL for (int c = 0; c < kDs; ++c) if (tx + kSide * c < d.D) put(dqr[tx + kSide * c], dq[i][c] * scale, d.accumulate);
  }
}

// Launches `kernel` with `smem` bytes of dynamic shared memory (above the 48 KiB default: opt in).
template <class... P, class... A>
void launch_tiled(void (*kernel)(P...), dim3 grid, size_t smem, cudaStream_t stream, A... args) {
#ifndef MEGATRAIN_SIMT
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
             "attention: shared memory opt-in");
#endif
  launch(kernel, grid, dim3(kThreads), smem, stream, args...);
}

size_t tile_floats(int rows, int ld) { return static_cast<size_t>(rows) * static_cast<size_t>(ld); }

// Calls f(max_d), max_d an std::integral_constant: the smallest of 32, 64, 128 that holds D (the
// per-thread accumulators are max_d / 16 columns wide).
template <class F>
void with_max_dim(int D, F f) {
  if (D <= 32) return f(std::integral_constant<int, 32>{});
  if (D <= 64) return f(std::integral_constant<int, 64>{});
  f(std::integral_constant<int, 128>{});
}

// The launches with given tiles: the production ones below, or (in a test) small ones.
template <int kBr, int kBc>
void forward_with(cudaStream_t stream, Rows out, float* lse, CRows q, CRows k, CRows v, const Dims& d) {
  const int ld = tile_stride(d.D);
  const size_t smem = sizeof(float) * (tile_floats(kBr, ld) + tile_floats(kBc, ld) +
                                       std::max(tile_floats(kBc, ld), tile_floats(kBr, kBc + 1)));
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(d.D));
  with_max_dim(d.D, [&](auto max_d) {
    launch_tiled(attention_forward_kernel<kBr, kBc, decltype(max_d)::value>, dim3(ceil_div(d.Tq, kBr), d.H, d.B),
                 smem, stream, out, lse, q, k, v, d, scale_log2);
  });
}

// The gradients of one block: dq at q's rows, dk and dv at k's.
struct Grads {
  Rows dq, dk, dv;
};
struct Inputs {
  CRows dout, q, k, v, out;
};

template <int kKvBr, int kKvBc, int kQBr, int kQBc>
void backward_with(cudaStream_t stream, const Grads& g, const Inputs& in, const float* lse, const Dims& d,
                   float* delta) {
  const int ld = tile_stride(d.D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int64_t rows = static_cast<int64_t>(d.B) * d.Tq * d.H;
  launch(attention_delta_kernel, dim3(ceil_div(rows, kDeltaWarps)), dim3(kDeltaWarps * 32), 0, stream, delta, in.dout,
         in.out, d);
  const size_t kv_smem =
      sizeof(float) * (2 * tile_floats(kKvBc, ld) + 2 * tile_floats(kKvBr, ld) + 2 * tile_floats(kKvBr, kKvBc + 1));
  const size_t q_smem =
      sizeof(float) * (2 * tile_floats(kQBr, ld) + 2 * tile_floats(kQBc, ld) + tile_floats(kQBr, kQBc + 1));
  with_max_dim(d.D, [&](auto max_d) {
    constexpr int kMaxD = decltype(max_d)::value;
    launch_tiled(attention_backward_dkdv_kernel<kKvBr, kKvBc, kMaxD>, dim3(ceil_div(d.Tk, kKvBc), d.Hkv, d.B),
                 kv_smem, stream, g.dk, g.dv, in.dout, in.q, in.k, in.v, lse, delta, d, scale);
    launch_tiled(attention_backward_dq_kernel<kQBr, kQBc, kMaxD>, dim3(ceil_div(d.Tq, kQBr), d.H, d.B), q_smem,
                 stream, g.dq, in.dout, in.q, in.k, in.v, lse, delta, d, scale);
  });
}

// Production tiles. Forward 64 × 64; dK/dV 32 query rows × 64 keys, dQ 64 query rows × 32 keys: at
// D = 128 the blocks need 99, 115 and 107 KiB of shared memory (A100 and H100 allow 163 and 227).
constexpr int kFwdBr = 64, kFwdBc = 64, kKvBr = 32, kKvBc = 64, kQBr = 64, kQBc = 32;

void check_dims(int H, int Hkv, int D) {
  if (!attention_can_run(H, Hkv, D))
    throw std::invalid_argument("CUDA attention: heads " + std::to_string(H) + "/" + std::to_string(Hkv) +
                                " and head_dim " + std::to_string(D) +
                                " unsupported (head_dim 1 to 128, kv heads dividing heads)");
}

}  // namespace

bool attention_can_run(int H, int Hkv, int D) {
  return H > 0 && Hkv > 0 && H % Hkv == 0 && D >= 1 && D <= kMaxHeadDim;
}

size_t attention_backward_scratch_floats(int B, int T, int H) {
  return static_cast<size_t>(B) * static_cast<size_t>(T) * static_cast<size_t>(H);
}

void attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv,
                       int D) {
  check_dims(H, Hkv, D);
  if (static_cast<int64_t>(B) * T == 0) return;
  forward_with<kFwdBr, kFwdBc>(stream, output_rows(out, T, H, D), lse, packed_heads(qkv, T, H, Hkv, D, 0),
                               packed_heads(qkv, T, H, Hkv, D, H), packed_heads(qkv, T, H, Hkv, D, H + Hkv),
                               Dims{B, T, T, H, Hkv, D, true, T, false});
}

void attention_backward(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int H, int Hkv, int D, float* scratch) {
  check_dims(H, Hkv, D);
  if (static_cast<int64_t>(B) * T == 0) return;
  const auto heads = [&](auto* p, int first) { return packed_heads(p, T, H, Hkv, D, first); };
  const Grads g{heads(dqkv, 0), heads(dqkv, H), heads(dqkv, H + Hkv)};
  const Inputs in{output_rows(dout, T, H, D), heads(qkv, 0), heads(qkv, H), heads(qkv, H + Hkv), output_rows(out, T, H, D)};
  backward_with<kKvBr, kKvBc, kQBr, kQBc>(stream, g, in, lse, Dims{B, T, T, H, Hkv, D, true, T, false}, scratch);
}

size_t attention_block_scratch_floats(const AttnBlock& d) {
  return static_cast<size_t>(d.B) * static_cast<size_t>(d.Tq) * static_cast<size_t>(d.H);
}

void attention_block_forward(cudaStream_t stream, AttnView<float> out, float* lse, AttnView<const float> q,
                             AttnView<const float> k, AttnView<const float> v, const AttnBlock& b) {
  check_dims(b.H, b.Hkv, b.D);
  if (static_cast<int64_t>(b.B) * b.Tq * b.Tk == 0) return;
  forward_with<kFwdBr, kFwdBc>(stream, out, lse, q, k, v, Dims{b.B, b.Tq, b.Tk, b.H, b.Hkv, b.D, b.causal, b.lse_ld, false});
}

void attention_block_backward(cudaStream_t stream, AttnView<float> dq, AttnView<float> dk, AttnView<float> dv,
                              AttnView<const float> dout, AttnView<const float> q, AttnView<const float> k,
                              AttnView<const float> v, AttnView<const float> out, const float* lse, const AttnBlock& b,
                              float* scratch) {
  check_dims(b.H, b.Hkv, b.D);
  if (static_cast<int64_t>(b.B) * b.Tq * b.Tk == 0) return;
  backward_with<kKvBr, kKvBc, kQBr, kQBc>(stream, Grads{dq, dk, dv}, Inputs{dout, q, k, v, out}, lse,
                                          Dims{b.B, b.Tq, b.Tk, b.H, b.Hkv, b.D, b.causal, b.lse_ld, true}, scratch);
}

}  // namespace megatrain::MT_CUDA_NS
