// Elementwise ops on the GPU: residual add, a bias added to every row, copy, scaling, inverted
// dropout and the conversions between float32 and bf16 / fp16. Each value is computed by the same
// float operations as on the CPU (kernels/cpu/elementwise.cpp, kernels/cpu/convert.cpp): results
// are bitwise the CPU's. The dropout mask and the 16-bit roundings call the very functions the CPU
// does (kernels/rng.h, kernels/half.h, compiled for the device too).
#include "kernels/cuda/elementwise.cuh"
#include "kernels/half.h"
#include "kernels/rng.h"

namespace megatrain::MT_CUDA_NS {
namespace {

struct Add {
  float* out;
  const float *a, *b;
  template <int W>
  __device__ void apply(int64_t i) const {
    float x[W], y[W];
    load<W>(x, a + i);
    load<W>(y, b + i);
    for (int k = 0; k < W; ++k) x[k] += y[k];
    store<W>(out + i, x);
  }
};

// Rows of out (N, C) += bias (C).
struct BiasAdd {
  float* out;
  const float* bias;
  int C;
  template <int W>
  __device__ void apply(int64_t row, int c) const {
    float x[W], b[W];
    load<W>(x, out + row * C + c);
    load<W>(b, bias + c);
    for (int k = 0; k < W; ++k) x[k] += b[k];
    store<W>(out + row * C + c, x);
  }
};

struct Copy {
  float* out;
  const float* inp;
  template <int W>
  __device__ void apply(int64_t i) const {
    float x[W];
    load<W>(x, inp + i);
    store<W>(out + i, x);
  }
};

struct Scale {
  float* x;
  float factor;
  template <int W>
  __device__ void apply(int64_t i) const {
    float v[W];
    load<W>(v, x + i);
    for (int k = 0; k < W; ++k) v[k] *= factor;
    store<W>(x + i, v);
  }
};

// One thread per Philox counter c: as on the CPU, x[i] is global element first + i, decided by word
// (first + i) % 4 of counter (first + i) / 4; so counter c covers x[4c − first … 4c − first + 3].
// With first a multiple of 4 and x 16-byte aligned those are one float4.
template <bool kVec4>
__global__ void dropout_kernel(float* x, int64_t n, int64_t first, int64_t c0, int64_t c1, RngKey counters,
                               uint32_t threshold, float keep_scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = c0 + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < c1; c += stride) {
    const RngWords w = rng_words(counters, static_cast<uint64_t>(c));
    const int64_t i0 = c * 4 - first;
    if (kVec4 && i0 >= 0 && i0 + 4 <= n) {
      float v[4];
      load<4>(v, x + i0);
      for (int k = 0; k < 4; ++k) v[k] = w[k] < threshold ? 0.0f : v[k] * keep_scale;
      store<4>(x + i0, v);
    } else {
      for (int k = 0; k < 4; ++k) {
        const int64_t i = i0 + k;
        if (i >= 0 && i < n) x[i] = w[k] < threshold ? 0.0f : x[i] * keep_scale;
      }
    }
  }
}

// Conversions; 16-bit values move as raw bits, four at a time as 8 bytes when vectorised.
enum class Half { bf16, fp16 };

template <Half kHalf>
__device__ inline uint16_t to_half(float f) {
  return kHalf == Half::bf16 ? float_to_bf16(f) : float_to_fp16(f);
}
template <Half kHalf>
__device__ inline float from_half(uint16_t h) {
  return kHalf == Half::bf16 ? bf16_to_float(h) : fp16_to_float(h);
}

template <Half kHalf>
struct ToHalf {
  uint16_t* out;
  const float* inp;
  template <int W>
  __device__ void apply(int64_t i) const {
    float v[W];
    load<W>(v, inp + i);
    if constexpr (W == 4) {
      ushort4 h;
      h.x = to_half<kHalf>(v[0]), h.y = to_half<kHalf>(v[1]), h.z = to_half<kHalf>(v[2]), h.w = to_half<kHalf>(v[3]);
      *reinterpret_cast<ushort4*>(out + i) = h;
    } else {
      for (int k = 0; k < W; ++k) out[i + k] = to_half<kHalf>(v[k]);
    }
  }
};

template <Half kHalf>
struct FromHalf {
  float* out;
  const uint16_t* inp;
  template <int W>
  __device__ void apply(int64_t i) const {
    float v[W];
    if constexpr (W == 4) {
      const ushort4 h = *reinterpret_cast<const ushort4*>(inp + i);
      v[0] = from_half<kHalf>(h.x), v[1] = from_half<kHalf>(h.y), v[2] = from_half<kHalf>(h.z),
      v[3] = from_half<kHalf>(h.w);
    } else {
      for (int k = 0; k < W; ++k) v[k] = from_half<kHalf>(inp[i + k]);
    }
    store<W>(out + i, v);
  }
};

template <Half kHalf>
struct RoundToHalf {
  float* out;
  const float* inp;
  template <int W>
  __device__ void apply(int64_t i) const {
    float v[W];
    load<W>(v, inp + i);
    for (int k = 0; k < W; ++k) v[k] = from_half<kHalf>(to_half<kHalf>(v[k]));
    store<W>(out + i, v);
  }
};

bool aligned8(const uint16_t* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

}  // namespace

void add_forward(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n) {
  flat_map(stream, n, aligned16(out, a, b), Add{out, a, b});
}

void bias_add(cudaStream_t stream, float* out, const float* bias, int64_t N, int C) {
  row_map(stream, N, C, C % 4 == 0 && aligned16(out, bias), BiasAdd{out, bias, C});
}

void copy(cudaStream_t stream, float* out, const float* inp, int64_t n) {
  flat_map(stream, n, aligned16(out, inp), Copy{out, inp});
}

void scale_inplace(cudaStream_t stream, float* x, int64_t n, float factor) {
  flat_map(stream, n, aligned16(x), Scale{x, factor});
}

void dropout_apply(cudaStream_t stream, float* x, int64_t n, float p, const RngKey& key) {
  if (n <= 0) return;
  // The CPU's scale and threshold, computed the same way.
  const float keep_scale = 1.0f / (1.0f - p);
  const uint32_t threshold = static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
  RngKey counters = key;
  counters.offset = 0;
  const auto first = static_cast<int64_t>(key.offset);
  const int64_t c0 = first / 4, c1 = (first + n + 3) / 4;
  const dim3 grid(grid_blocks(c1 - c0, kMapThreads)), block(kMapThreads);
  if (first % 4 == 0 && aligned16(x))
    launch(dropout_kernel<true>, grid, block, 0, stream, x, n, first, c0, c1, counters, threshold, keep_scale);
  else
    launch(dropout_kernel<false>, grid, block, 0, stream, x, n, first, c0, c1, counters, threshold, keep_scale);
}

void f32_to_bf16(cudaStream_t stream, uint16_t* out, const float* inp, int64_t n) {
  flat_map(stream, n, aligned16(inp) && aligned8(out), ToHalf<Half::bf16>{out, inp});
}
void f32_to_fp16(cudaStream_t stream, uint16_t* out, const float* inp, int64_t n) {
  flat_map(stream, n, aligned16(inp) && aligned8(out), ToHalf<Half::fp16>{out, inp});
}
void bf16_to_f32(cudaStream_t stream, float* out, const uint16_t* inp, int64_t n) {
  flat_map(stream, n, aligned16(out) && aligned8(inp), FromHalf<Half::bf16>{out, inp});
}
void fp16_to_f32(cudaStream_t stream, float* out, const uint16_t* inp, int64_t n) {
  flat_map(stream, n, aligned16(out) && aligned8(inp), FromHalf<Half::fp16>{out, inp});
}
void round_to_bf16(cudaStream_t stream, float* out, const float* inp, int64_t n) {
  flat_map(stream, n, aligned16(out, inp), RoundToHalf<Half::bf16>{out, inp});
}
void round_to_fp16(cudaStream_t stream, float* out, const float* inp, int64_t n) {
  flat_map(stream, n, aligned16(out, inp), RoundToHalf<Half::fp16>{out, inp});
}

}  // namespace megatrain::MT_CUDA_NS
