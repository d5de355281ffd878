// Linear layer on CPU through gemm (kernels/cpu/gemm.h). Weight layout (OC, C) as PyTorch.
#include <cstring>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"

namespace megatrain::cpu {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int C,
                    int OC) {
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) std::memcpy(out + i * OC, bias, sizeof(float) * static_cast<size_t>(OC));
    beta = 1.0f;
  }
  gemm(Trans::no, Trans::yes, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int C, int OC) {
  if (dinp) gemm(Trans::no, Trans::no, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
  if (dweight) gemm(Trans::yes, Trans::no, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
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
