// Token (+ learned position) embedding on CPU. Backward scatters rows into dwte in token order
// (serial over tokens, vectorised over C), so repeated tokens sum in a fixed order.
#include "kernels/cpu/cpu.h"

namespace megatrain::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t N, int T,
                       int C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* e = wte + static_cast<int64_t>(tokens[i]) * C;
    float* y = out + i * C;
    if (wpe) {
      const float* p = wpe + (i % T) * C;
      for (int c = 0; c < C; ++c) y[c] = e[c] + p[c];
    } else {
      for (int c = 0; c < C; ++c) y[c] = e[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t N, int T,
                        int C) {
  for (int64_t i = 0; i < N; ++i) {
    float* d = dwte + static_cast<int64_t>(tokens[i]) * C;
    const float* g = dout + i * C;
    for (int c = 0; c < C; ++c) d[c] += g[c];
  }
  if (dwpe) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; ++t) {
      float* d = dwpe + static_cast<int64_t>(t) * C;
      for (int64_t i = t; i < N; i += T)
        for (int c = 0; c < C; ++c) d[c] += dout[i * C + c];
    }
  }
}

}  // namespace megatrain::cpu
