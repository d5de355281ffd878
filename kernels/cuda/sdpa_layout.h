// The attention ops' packed tensors (kernels/ops.h: qkv (B, T, (H + 2·Hkv)·D) with the query,
// key and value heads side by side in each row, out (B, T, H·D), lse (B, H, T)) as the strided
// (batch, head, token, dim) views a fused attention library takes (cuDNN's SDPA graphs,
// kernels/cuda/cudnn_attention.h): nothing is transposed or copied, the strides walk the packed
// rows. Pure, so tests/kernels/test_sdpa_layout.cpp checks on the CPU that attention computed
// through these views is the CPU attention op's.
#pragma once
#include <array>
#include <cstdint>

namespace megatrain::cuda {

// Element (b, h, t, d) of the view is element offset + Σ index·stride of the buffer (a statistics
// view has d = 1 and dims[3] = 1).
struct StridedView {
  std::array<int64_t, 4> dims, strides;
  int64_t offset = 0;
  int64_t at(int64_t b, int64_t h, int64_t t, int64_t d) const {
    return offset + b * strides[0] + h * strides[1] + t * strides[2] + d * strides[3];
  }
};

// q, k, v into qkv (and dq, dk, dv into dqkv); o into out (and dout); stats into lse.
struct SdpaLayout {
  StridedView q, k, v, o, stats;
};

SdpaLayout sdpa_layout(int B, int T, int H, int Hkv, int D);

}  // namespace megatrain::cuda
