// Token embedding of a vocabulary shard and learned position embedding on CPU. Backward scatters
// rows into dwte in token order (serial over tokens, vectorised over C), so repeated tokens sum in
// a fixed order; dwpe sums each position's rows in row order.
#include <cstring>

#include "kernels/cpu/cpu.h"

namespace megatrain::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N, int V, int C,
                       int vocab_begin) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    float* y = out + i * C;
    if (row >= 0 && row < V)
      std::memcpy(y, wte + row * C, sizeof(float) * static_cast<size_t>(C));
    else
      std::memset(y, 0, sizeof(float) * static_cast<size_t>(C));
  }
}

void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int V, int C,
                        int vocab_begin) {
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    if (row < 0 || row >= V) continue;
    float* d = dwte + row * C;
    const float* g = dout + i * C;
    for (int c = 0; c < C; ++c) d[c] += g[c];
  }
}

void position_embedding_forward(float* out, const float* wpe, int64_t n, int C, int T, int64_t first_row) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* p = wpe + ((first_row + i) % T) * C;
    float* y = out + i * C;
    for (int c = 0; c < C; ++c) y[c] += p[c];
  }
}

void position_embedding_backward(float* dwpe, const float* dout, int64_t n, int C, int T, int64_t first_row) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float* d = dwpe + static_cast<int64_t>(t) * C;
    for (int64_t i = ((t - first_row) % T + T) % T; i < n; i += T)
      for (int c = 0; c < C; ++c) d[c] += dout[i * C + c];
  }
}

}  // namespace megatrain::cpu
