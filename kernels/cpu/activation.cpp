// GELU (tanh approximation, as GPT-2) and SwiGLU on CPU; elementwise, vectorised through vec.h.
// The MLP's hidden tensors (the FC output read here, the activation and the gradient written) are
// float32 or bf16 (kernels/cpu/bf16.h): widened on the load, float32 math, rounded once on the
// store. The incoming gradient is the output projection's float32 input gradient either way.
#include <cmath>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/vec.h"

namespace megatrain::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

template <typename T>
void gelu_forward_t(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(inp[i]);
    const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
    store(out[i], 0.5f * x * (1.0f + fast_tanh(u)));
  }
}

template <typename T>
void gelu_backward_t(T* dinp, const float* dout, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(inp[i]);
    const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
    const float t = fast_tanh(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    const float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    store(dinp[i], grad * dout[i]);
  }
}

template <typename T>
void swiglu_forward_t(T* out, const T* inp, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const T* gate = inp + i * 2 * F;
    const T* up = gate + F;
    T* y = out + i * F;
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      const float g = load(gate[j]);
      store(y[j], g * sigmoid(g) * load(up[j]));
    }
  }
}

template <typename T>
void swiglu_backward_t(T* dinp, const float* dout, const T* inp, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const T* gate = inp + i * 2 * F;
    const T* up = gate + F;
    const float* dy = dout + i * F;
    T* dgate = dinp + i * 2 * F;
    T* dup = dgate + F;
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      const float g = load(gate[j]);
      const float sg = sigmoid(g);
      const float silu = g * sg;
      store(dup[j], dy[j] * silu);
      store(dgate[j], dy[j] * load(up[j]) * (sg + silu * (1.0f - sg)));
    }
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) { gelu_forward_t(out, inp, n); }
void gelu_forward(bf16* out, const bf16* inp, int64_t n) { gelu_forward_t(out, inp, n); }
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) { gelu_backward_t(dinp, dout, inp, n); }
void gelu_backward(bf16* dinp, const float* dout, const bf16* inp, int64_t n) { gelu_backward_t(dinp, dout, inp, n); }
void swiglu_forward(float* out, const float* inp, int64_t N, int F) { swiglu_forward_t(out, inp, N, F); }
void swiglu_forward(bf16* out, const bf16* inp, int64_t N, int F) { swiglu_forward_t(out, inp, N, F); }
void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t N, int F) {
  swiglu_backward_t(dinp, dout, inp, N, F);
}
void swiglu_backward(bf16* dinp, const float* dout, const bf16* inp, int64_t N, int F) {
  swiglu_backward_t(dinp, dout, inp, N, F);
}

}  // namespace megatrain::cpu
