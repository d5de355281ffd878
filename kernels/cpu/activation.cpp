// GELU (tanh approximation, as GPT-2) and SwiGLU on CPU; elementwise, vectorised through vec.h.
#include <cmath>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec.h"

namespace megatrain::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
    out[i] = 0.5f * x * (1.0f + fast_tanh(u));
  }
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
    const float t = fast_tanh(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    const float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    dinp[i] = grad * dout[i];
  }
}

void swiglu_forward(float* out, const float* inp, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* gate = inp + i * 2 * F;
    const float* up = gate + F;
    float* y = out + i * F;
#pragma omp simd
    for (int j = 0; j < F; ++j) y[j] = gate[j] * sigmoid(gate[j]) * up[j];
  }
}

void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* gate = inp + i * 2 * F;
    const float* up = gate + F;
    const float* dy = dout + i * F;
    float* dgate = dinp + i * 2 * F;
    float* dup = dgate + F;
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      const float g = gate[j];
      const float sg = sigmoid(g);
      const float silu = g * sg;
      dup[j] = dy[j] * silu;
      dgate[j] = dy[j] * up[j] * (sg + silu * (1.0f - sg));
    }
  }
}

}  // namespace megatrain::cpu
