// LayerNorm and RMSNorm on CPU. Rows in parallel; the weight/bias gradients are column sums taken
// in a fixed row order per column block, so they do not depend on the thread count. The forward
// writes float32 or bf16 (kernels/cpu/bf16.h): the statistics and the normalised value are float32
// either way, rounded once on the store.
#include <cmath>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"

namespace megatrain::cpu {
namespace {

// dst[c] += Σ_i term(i, c) over rows i in order, columns split across threads.
template <typename Term>
void column_accumulate(float* dst, int64_t N, int C, Term term) {
  constexpr int kChunk = 64;
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += kChunk) {
    const int c1 = c0 + kChunk < C ? c0 + kChunk : C;
    float acc[kChunk] = {};
    for (int64_t i = 0; i < N; ++i)
      for (int c = c0; c < c1; ++c) acc[c - c0] += term(i, c);
    for (int c = c0; c < c1; ++c) dst[c] += acc[c - c0];
  }
}

template <typename Out>
void layernorm_rows(Out* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                    int64_t N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float sum = 0.0f;
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum / static_cast<float>(C);
    float var = 0.0f;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(var / static_cast<float>(C) + eps);
    Out* y = out + i * C;
    if (bias) {
      for (int c = 0; c < C; ++c) store(y[c], (x[c] - m) * s * weight[c] + bias[c]);
    } else {
      for (int c = 0; c < C; ++c) store(y[c], (x[c] - m) * s * weight[c]);
    }
    mean[i] = m;
    rstd[i] = s;
  }
}

template <typename Out>
void rmsnorm_rows(Out* out, float* rstd, const float* inp, const float* weight, int64_t N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float ss = 0.0f;
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const float s = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    Out* y = out + i * C;
    for (int c = 0; c < C; ++c) store(y[c], x[c] * s * weight[c]);
    rstd[i] = s;
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C, float eps) {
  layernorm_rows(out, mean, rstd, inp, weight, bias, N, C, eps);
}

void layernorm_forward(bf16* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C, float eps) {
  layernorm_rows(out, mean, rstd, inp, weight, bias, N, C, eps);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* dresidual,
                        const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N,
                        int C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    const float m = mean[i], s = rstd[i];
    float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float dn = dy[c] * weight[c];
      dnorm_mean += dn;
      dnorm_xhat_mean += dn * (x[c] - m) * s;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_xhat_mean /= static_cast<float>(C);
    float* dx = dinp + i * C;
    const float* dr = dresidual ? dresidual + i * C : nullptr;
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float g = s * (dy[c] * weight[c] - dnorm_mean - xhat * dnorm_xhat_mean);
      dx[c] = dr ? dr[c] + g : g;
    }
  }
  column_accumulate(dweight, N, C,
                    [&](int64_t i, int c) { return dout[i * C + c] * (inp[i * C + c] - mean[i]) * rstd[i]; });
  if (dbias) column_accumulate(dbias, N, C, [&](int64_t i, int c) { return dout[i * C + c]; });
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C, float eps) {
  rmsnorm_rows(out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* weight, int64_t N, int C, float eps) {
  rmsnorm_rows(out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* dresidual, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    const float s = rstd[i];
    float dnorm_xhat_mean = 0.0f;
    for (int c = 0; c < C; ++c) dnorm_xhat_mean += dy[c] * weight[c] * x[c] * s;
    dnorm_xhat_mean /= static_cast<float>(C);
    float* dx = dinp + i * C;
    const float* dr = dresidual ? dresidual + i * C : nullptr;
    for (int c = 0; c < C; ++c) {
      const float g = s * (dy[c] * weight[c] - x[c] * s * dnorm_xhat_mean);
      dx[c] = dr ? dr[c] + g : g;
    }
  }
  column_accumulate(dweight, N, C, [&](int64_t i, int c) { return dout[i * C + c] * inp[i * C + c] * rstd[i]; });
}

}  // namespace megatrain::cpu
