// Linear layer on CPU through gemm (kernels/cpu/gemm.h). Weight layout (OC, C) as PyTorch.
// Operands and the forward's result are float32 or bf16 (kernels/cpu/bf16.h): a bf16 operand is
// what a bf16 GEMM reads as it is, so where oneDNN has a native bf16 matmul it is passed without a
// conversion pass; a float32 operand on a 16-bit stream is rounded into scratch first, as before.
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"

namespace megatrain::cpu {
namespace {

std::atomic<int64_t> g_scratch_bytes{0};  // matmul_scratch_bytes()

template <typename V>
auto* grown(V& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) {
    g_scratch_bytes += (n - static_cast<int64_t>(v.size())) * static_cast<int64_t>(sizeof(v[0]));
    v.resize(static_cast<size_t>(n));
  }
  return v.data();
}

// One operand's conversions, grow only, reused call to call.
struct Scratch {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

// x (n values) as the bf16 bits a native bf16 GEMM reads: itself, or its rounding in scratch.
const uint16_t* bf16_bits(MatmulArg x, int64_t n, Scratch& s) {
  if (x.dtype == DType::bf16) return static_cast<const uint16_t*>(x.data);
  uint16_t* out = grown(s.bits, n);
  f32_to_half(Precision::bf16, out, static_cast<const float*>(x.data), n);
  return out;
}

// x (n values) as the float32 values the float32 GEMM reads for precision p: itself (float32 at
// fp32), its rounding to p (float32 at bf16 or fp16), or its widening (bf16; exact) in scratch.
const float* f32_values(Precision p, MatmulArg x, int64_t n, Scratch& s) {
  if (x.dtype == DType::bf16) {
    float* out = grown(s.values, n);
    half_to_f32(Precision::bf16, out, static_cast<const uint16_t*>(x.data), n);
    return out;
  }
  if (p == Precision::fp32) return static_cast<const float*>(x.data);
  float* out = grown(s.values, n);
  round_to_half(p, out, static_cast<const float*>(x.data), n);
  return out;
}

// gemm() of A (a_size values) and B (b_size), or of their roundings to p with float32 sums: with a
// native bf16 GEMM (cpu::native_bf16_gemm) on bf16 bits and gemm_bf16, otherwise on float32 values
// (the 16-bit values are exact in float32).
void linear_gemm(Precision p, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, MatmulArg A, int64_t lda,
                 int64_t a_size, MatmulArg B, int64_t ldb, int64_t b_size, float beta, float* C, int64_t ldc) {
  thread_local Scratch a, b;
  if (p == Precision::bf16 && native_bf16_gemm())
    return gemm_bf16(ta, tb, M, N, K, 1.0f, bf16_bits(A, a_size, a), lda, bf16_bits(B, b_size, b), ldb, beta, C,
                     ldc);
  gemm(ta, tb, M, N, K, 1.0f, f32_values(p, A, a_size, a), lda, f32_values(p, B, b_size, b), ldb, beta, C, ldc);
}

// dbias[c] += Σ_i dout[i][c]: columns split across threads, each summing its rows in order.
template <typename T>
void bias_grad(float* dbias, const T* dout, int64_t N, int OC) {
  constexpr int kChunk = 64;
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < OC; c0 += kChunk) {
    const int c1 = c0 + kChunk < OC ? c0 + kChunk : OC;
    float acc[kChunk] = {};
    for (int64_t i = 0; i < N; ++i) {
      const T* row = dout + i * OC;
      for (int c = c0; c < c1; ++c) acc[c - c0] += load(row[c]);
    }
    for (int c = c0; c < c1; ++c) dbias[c] += acc[c - c0];
  }
}

}  // namespace

int64_t matmul_scratch_bytes() { return g_scratch_bytes.load(); }

void matmul_forward(void* out, DType out_dtype, MatmulArg inp, MatmulArg weight, const float* bias, int64_t N, int C,
                    int OC, Precision p) {
  thread_local std::vector<float> sums;  // a bf16 result's float32 sums
  float* y = out_dtype == DType::f32 ? static_cast<float*>(out) : grown(sums, N * OC);
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) std::memcpy(y + i * OC, bias, sizeof(float) * static_cast<size_t>(OC));
    beta = 1.0f;
  }
  linear_gemm(p, Trans::no, Trans::yes, N, OC, C, inp, C, N * C, weight, C, int64_t{OC} * C, beta, y, OC);
  if (out_dtype == DType::bf16) f32_to_half(Precision::bf16, static_cast<uint16_t*>(out), y, N * OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, MatmulArg dout, MatmulArg inp, MatmulArg weight,
                     int64_t N, int C, int OC, Precision p) {
  // A float32 dout that both GEMMs read as bf16 bits (the residual stream's gradient, the logits'):
  // rounded once, not once per GEMM.
  thread_local Scratch rounded_dout;
  MatmulArg dy = dout;
  if (dinp && dweight && dout.dtype == DType::f32 && p == Precision::bf16 && native_bf16_gemm())
    dy = MatmulArg{bf16_bits(dout, N * OC, rounded_dout), DType::bf16};
  if (dinp) linear_gemm(p, Trans::no, Trans::no, N, C, OC, dy, OC, N * OC, weight, C, int64_t{OC} * C, 0.0f, dinp, C);
  if (dweight) linear_gemm(p, Trans::yes, Trans::no, OC, C, N, dy, OC, N * OC, inp, C, N * C, 1.0f, dweight, C);
  if (!dbias) return;
  if (dout.dtype == DType::bf16)
    bias_grad(dbias, static_cast<const bf16*>(dout.data), N, OC);
  else
    bias_grad(dbias, static_cast<const float*>(dout.data), N, OC);
}

}  // namespace megatrain::cpu
