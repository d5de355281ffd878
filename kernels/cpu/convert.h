// Conversions between float32 and the 16-bit floats of mixed precision (kernels/half.h), n values
// each, OpenMP-parallel: `p` is Precision::bf16 or Precision::fp16 (kernels/device.h).
#pragma once
#include <cstdint>

#include "kernels/device.h"

namespace megatrain::cpu {

// out[i] = inp[i] rounded to p (nearest, ties to even; ±inf beyond the range), as raw bits.
void f32_to_half(Precision p, uint16_t* out, const float* inp, int64_t n);
// out[i] = the float32 value of the bits inp[i] (exact).
void half_to_f32(Precision p, float* out, const uint16_t* inp, int64_t n);
// out[i] = inp[i] rounded to p, as a float32 (the two above in one pass; out may be inp).
void round_to_half(Precision p, float* out, const float* inp, int64_t n);

}  // namespace megatrain::cpu
