// GELU (tanh approximation, as GPT-2), GELU with the preceding linear layer's bias fused in, and
// SwiGLU, forward and backward, on the GPU. Memory-bound: float4 loads and stores where aligned
// (elementwise.cuh). The formulas are the CPU's (kernels/cpu/activation.cpp) with CUDA's tanhf
// and expf for its fast_tanh and fast_exp, so results agree to a few float32 ulps, not bitwise.
// The fused bias gradient is a deterministic column sum (column_sum.cuh).
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

__device__ inline float gelu(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu(x) / dx.
__device__ inline float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  const float t = tanhf(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

struct Gelu {
  float* out;
  const float* inp;
  template <int W>
  __device__ void apply(int64_t i) const {
    float x[W];
    load<W>(x, inp + i);
    for (int k = 0; k < W; ++k) x[k] = gelu(x[k]);
    store<W>(out + i, x);
  }
};

struct GeluBackward {
  float* dinp;
  const float *dout, *inp;
  template <int W>
  __device__ void apply(int64_t i) const {
    float x[W], dy[W];
    load<W>(x, inp + i);
    load<W>(dy, dout + i);
    for (int k = 0; k < W; ++k) dy[k] *= gelu_grad(x[k]);
    store<W>(dinp + i, dy);
  }
};

// Rows of (N, OC): out = gelu(inp + bias), or with dout given dinp = gelu'(inp + bias) · dout.
struct BiasGelu {
  float* out;
  const float *dout, *inp, *bias;
  int OC;
  template <int W>
  __device__ void apply(int64_t row, int c) const {
    const int64_t at = row * OC + c;
    float x[W], b[W];
    load<W>(x, inp + at);
    load<W>(b, bias + c);
    for (int k = 0; k < W; ++k) x[k] += b[k];
    if (dout) {
      float dy[W];
      load<W>(dy, dout + at);
      for (int k = 0; k < W; ++k) x[k] = dy[k] * gelu_grad(x[k]);
    } else {
      for (int k = 0; k < W; ++k) x[k] = gelu(x[k]);
    }
    store<W>(out + at, x);
  }
};

struct Column {  // the bias gradient's term: dinp itself
  const float* x;
  int C;
  __device__ float operator()(int64_t i, int c) const { return x[i * C + c]; }
};

// Rows of inp (N, 2F) = [gate | up]; out (N, F) = silu(gate) · up.
struct Swiglu {
  float* out;
  const float* inp;
  int F;
  template <int W>
  __device__ void apply(int64_t row, int j) const {
    const float* gate = inp + row * 2 * F + j;
    float g[W], u[W];
    load<W>(g, gate);
    load<W>(u, gate + F);
    for (int k = 0; k < W; ++k) g[k] = g[k] * sigmoid(g[k]) * u[k];
    store<W>(out + row * F + j, g);
  }
};

// dup = dy · silu(gate), dgate = dy · up · silu'(gate), silu' = σ + silu · (1 − σ).
struct SwigluBackward {
  float* dinp;
  const float *dout, *inp;
  int F;
  template <int W>
  __device__ void apply(int64_t row, int j) const {
    const float* gate = inp + row * 2 * F + j;
    float* dgate = dinp + row * 2 * F + j;
    float g[W], u[W], dy[W], dg[W], du[W];
    load<W>(g, gate);
    load<W>(u, gate + F);
    load<W>(dy, dout + row * F + j);
    for (int k = 0; k < W; ++k) {
      const float sg = sigmoid(g[k]);
      const float silu = g[k] * sg;
      du[k] = dy[k] * silu;
      dg[k] = dy[k] * u[k] * (sg + silu * (1.0f - sg));
    }
    store<W>(dgate, dg);
    store<W>(dgate + F, du);
  }
};

}  // namespace

void gelu_forward(cudaStream_t stream, float* out, const float* inp, int64_t n) {
  flat_map(stream, n, aligned16(out, inp), Gelu{out, inp});
}

void gelu_backward(cudaStream_t stream, float* dinp, const float* dout, const float* inp, int64_t n) {
  flat_map(stream, n, aligned16(dinp, dout, inp), GeluBackward{dinp, dout, inp});
}

void bias_gelu_forward(cudaStream_t stream, float* out, const float* inp, const float* bias, int64_t N, int OC) {
  row_map(stream, N, OC, OC % 4 == 0 && aligned16(out, inp, bias), BiasGelu{out, nullptr, inp, bias, OC});
}

size_t bias_gelu_backward_scratch_floats(int64_t N, int OC) { return column_sum_scratch_floats(N, OC); }

void bias_gelu_backward(cudaStream_t stream, float* dinp, float* dbias, const float* dout, const float* inp,
                        const float* bias, int64_t N, int OC, float* scratch) {
  if (N <= 0) return;
  row_map(stream, N, OC, OC % 4 == 0 && aligned16(dinp, dout, inp, bias), BiasGelu{dinp, dout, inp, bias, OC});
  if (dbias) column_sum_accumulate(stream, dbias, N, OC, Column{dinp, OC}, scratch);
}

void swiglu_forward(cudaStream_t stream, float* out, const float* inp, int64_t N, int F) {
  row_map(stream, N, F, F % 4 == 0 && aligned16(out, inp), Swiglu{out, inp, F});
}

void swiglu_backward(cudaStream_t stream, float* dinp, const float* dout, const float* inp, int64_t N, int F) {
  row_map(stream, N, F, F % 4 == 0 && aligned16(dinp, dout, inp), SwigluBackward{dinp, dout, inp, F});
}

}  // namespace megatrain::MT_CUDA_NS
