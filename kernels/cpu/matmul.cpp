// Linear layer on CPU through gemm (kernels/cpu/gemm.h). Weight layout (OC, C) as PyTorch.
#include <atomic>
#include <cstring>

#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"

namespace megatrain::cpu {
namespace {

std::atomic<int64_t> g_scratch_bytes{0};  // matmul_scratch_bytes()

// gemm() of A (a_size floats) and B (b_size), or of their roundings to p with float32 sums: with
// a native bf16 GEMM (cpu::native_bf16_gemm) through 16-bit copies and gemm_bf16, otherwise through
// float32 copies holding the roundings (one conversion pass; the 16-bit values are exact in float32).
void linear_gemm(Precision p, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 int64_t a_size, const float* B, int64_t ldb, int64_t b_size, float beta, float* C, int64_t ldc) {
  if (p == Precision::fp32) return gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  const auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) >= n) return;
    g_scratch_bytes += (n - static_cast<int64_t>(v.size())) * static_cast<int64_t>(sizeof(v[0]));
    v.resize(static_cast<size_t>(n));
  };
  if (p == Precision::bf16 && native_bf16_gemm()) {
    thread_local std::vector<uint16_t> a, b;  // grow only; reused call to call
    grow(a, a_size), grow(b, b_size);
    f32_to_half(p, a.data(), A, a_size);
    f32_to_half(p, b.data(), B, b_size);
    return gemm_bf16(ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, beta, C, ldc);
  }
  thread_local std::vector<float> a, b;
  grow(a, a_size), grow(b, b_size);
  round_to_half(p, a.data(), A, a_size);
  round_to_half(p, b.data(), B, b_size);
  gemm(ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, beta, C, ldc);
}

}  // namespace

int64_t matmul_scratch_bytes() { return g_scratch_bytes.load(); }

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int C,
                    int OC, Precision p) {
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) std::memcpy(out + i * OC, bias, sizeof(float) * static_cast<size_t>(OC));
    beta = 1.0f;
  }
  linear_gemm(p, Trans::no, Trans::yes, N, OC, C, inp, C, N * C, weight, C, int64_t{OC} * C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int C, int OC, Precision p) {
  if (dinp) linear_gemm(p, Trans::no, Trans::no, N, C, OC, dout, OC, N * OC, weight, C, int64_t{OC} * C, 0.0f, dinp, C);
  if (dweight) linear_gemm(p, Trans::yes, Trans::no, OC, C, N, dout, OC, N * OC, inp, C, N * C, 1.0f, dweight, C);
  if (dbias) {
    // Columns split across threads; each column sums its rows in order (deterministic).
    constexpr int kChunk = 64;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < OC; c0 += kChunk) {
      const int c1 = c0 + kChunk < OC ? c0 + kChunk : OC;
      float acc[kChunk] = {};
      for (int64_t i = 0; i < N; ++i) {
        const float* row = dout + i * OC;
        for (int c = c0; c < c1; ++c) acc[c - c0] += row[c];
      }
      for (int c = c0; c < c1; ++c) dbias[c] += acc[c - c0];
    }
  }
}

}  // namespace megatrain::cpu
