// Mixture of Experts token movement on the CPU (kernels/ops.h): rows copied into and out of the
// expert-ordered send buffer by the routing plan's row numbers, the combine weighted by the gates,
// and their backward. Each token's k assignments are visited in choice order, so the sums are
// those of model/moe.cpp's loops before these became ops; tokens run in parallel.
#include <cstring>

#include "kernels/cpu/cpu.h"

namespace megatrain::cpu {

void moe_permute(float* send, const float* x, const int32_t* row, int64_t n_assignments, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < n_assignments; ++a)
    if (row[a] >= 0) std::memcpy(send + int64_t{row[a]} * C, x + a / k * C, sizeof(float) * static_cast<size_t>(C));
}

void moe_permute_backward(float* dx, const float* dsend, const int32_t* row, int64_t N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t)
    for (int j = 0; j < k; ++j) {
      const int32_t r = row[t * k + j];
      if (r < 0) continue;
      const float* from = dsend + int64_t{r} * C;
      float* to = dx + t * C;
      for (int c = 0; c < C; ++c) to[c] += from[c];
    }
}

void moe_unpermute(float* y, const float* out, const int32_t* row, const float* gates, int64_t N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    float* to = y + t * C;
    std::memset(to, 0, sizeof(float) * static_cast<size_t>(C));
    for (int j = 0; j < k; ++j) {
      const int32_t r = row[t * k + j];
      if (r < 0) continue;
      const float *o = out + int64_t{r} * C, g = gates[t * k + j];
      for (int c = 0; c < C; ++c) to[c] += g * o[c];
    }
  }
}

void moe_unpermute_backward(float* dgates, float* dout, const float* dy, const float* out, const int32_t* row,
                            const float* gates, int64_t N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < N * k; ++a) {
    dgates[a] = 0.0f;
    const int32_t r = row[a];
    if (r < 0) continue;
    const float *g = dy + a / k * C, *o = out + int64_t{r} * C;
    float* d = dout + int64_t{r} * C;
    double dot = 0.0;
    for (int c = 0; c < C; ++c) {
      dot += static_cast<double>(g[c]) * o[c];
      d[c] = gates[a] * g[c];
    }
    dgates[a] = static_cast<float>(dot);
  }
}

}  // namespace megatrain::cpu
