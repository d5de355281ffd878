// Rotary position embedding on the GPU, in place, Hugging Face "rotate half" convention (see
// kernels/cpu/rope.cpp): for head vector x of size D at position t = pos0 + row and j < D/2, with
// a = t · inv_freq(j) (kernels/rope_frequencies.h) and m its attention factor,
// x'[j] = m·(x[j]·cos a − x[j + D/2]·sin a),  x'[j + D/2] = m·(x[j + D/2]·cos a + x[j]·sin a).
// Only the q and k heads of a qkv row rotate. Backward is the same map with −a.
// A block per (b, t) row: it first tabulates cos a and sin a for its position in shared memory,
// computed as the CPU does (double precision, then rounded to float), so both use the same float
// factors (up to a last-bit difference between the two libraries' double cos/sin, which rounding
// to float almost always hides); then its threads rotate the row's heads, four j at a time where
// aligned.
#include "kernels/cuda/elementwise.cuh"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kRopeThreads = 128;

// W = 4: D/2 a multiple of 4 and qkv 16-byte aligned.
template <int W>
__global__ void rope_kernel(float* qkv, int B, int T, int H, int Hkv, int D, RopeFrequencies f, float sign,
                            int pos0) {
  MT_DYNAMIC_SHARED(float, table);  // cos a for j < D/2, then sin a (times sign)
  const int half = D / 2;
  float* cs = table;
  float* sn = table + half;
  const int64_t row_floats = static_cast<int64_t>(H + 2 * Hkv) * D;
  const int groups = (H + Hkv) * half / W;  // rotated pairs (head, j) of a row, W at a time
  for (int64_t r = blockIdx.x; r < static_cast<int64_t>(B) * T; r += gridDim.x) {
    const int t = static_cast<int>(r % T);
    for (int j = static_cast<int>(threadIdx.x); j < half; j += static_cast<int>(blockDim.x)) {
      const double a = static_cast<double>(pos0 + t) * rope_inv_freq(f, j, D);
      cs[j] = f.attention * static_cast<float>(cos(a));
      sn[j] = f.attention * (sign * static_cast<float>(sin(a)));
    }
    __syncthreads();
    float* x_row = qkv + r * row_floats;
    for (int g = static_cast<int>(threadIdx.x); g < groups; g += static_cast<int>(blockDim.x)) {
      const int h = g * W / half, j = g * W % half;
      float* x = x_row + static_cast<int64_t>(h) * D + j;
      float x0[W], x1[W], c[W], s[W];
      load<W>(x0, x);
      load<W>(x1, x + half);
      load<W>(c, cs + j);
      load<W>(s, sn + j);
      float y0[W], y1[W];
      for (int k = 0; k < W; ++k) {
        y0[k] = x0[k] * c[k] - x1[k] * s[k];
        y1[k] = x1[k] * c[k] + x0[k] * s[k];
      }
      store<W>(x, y0);
      store<W>(x + half, y1);
    }
    __syncthreads();  // the table is rewritten for the next row
  }
}

void rope(cudaStream_t stream, float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& f, float sign,
          int pos0) {
  if (static_cast<int64_t>(B) * T == 0 || H + Hkv == 0 || D < 2) return;
  const dim3 grid(grid_blocks(static_cast<int64_t>(B) * T * kRopeThreads, kRopeThreads)), block(kRopeThreads);
  const size_t smem = sizeof(float) * static_cast<size_t>(D / 2 * 2);
  if ((D / 2) % 4 == 0 && aligned16(qkv))
    launch(rope_kernel<4>, grid, block, smem, stream, qkv, B, T, H, Hkv, D, f, sign, pos0);
  else
    launch(rope_kernel<1>, grid, block, smem, stream, qkv, B, T, H, Hkv, D, f, sign, pos0);
}

}  // namespace

void rope_forward(cudaStream_t stream, float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& freq,
                  int pos0) {
  rope(stream, qkv, B, T, H, Hkv, D, freq, 1.0f, pos0);
}

void rope_backward(cudaStream_t stream, float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& freq,
                   int pos0) {
  rope(stream, qkv, B, T, H, Hkv, D, freq, -1.0f, pos0);
}

}  // namespace megatrain::MT_CUDA_NS
