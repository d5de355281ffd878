#include "kernels/cuda/sdpa_layout.h"

namespace megatrain::cuda {

SdpaLayout sdpa_layout(int B, int T, int H, int Hkv, int D) {
  const int64_t row = static_cast<int64_t>(H + 2 * Hkv) * D, out_row = static_cast<int64_t>(H) * D;
  const std::array<int64_t, 4> qkv_strides{T * row, D, row, 1};
  SdpaLayout l;
  l.q = {{B, H, T, D}, qkv_strides, 0};
  l.k = {{B, Hkv, T, D}, qkv_strides, static_cast<int64_t>(H) * D};
  l.v = {{B, Hkv, T, D}, qkv_strides, static_cast<int64_t>(H + Hkv) * D};
  l.o = {{B, H, T, D}, {T * out_row, D, out_row, 1}, 0};
  l.stats = {{B, H, T, 1}, {static_cast<int64_t>(H) * T, T, 1, 1}, 0};
  return l;
}

}  // namespace megatrain::cuda
