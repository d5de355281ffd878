// Float32 values into a 16-bit tensor and back (kernels/ops.h convert), on the stream's device: what
// ZeRO's 16-bit parameter copies and bf16 reductions are made of and read back through.
#pragma once
#include "kernels/ops.h"

namespace megatrain {

// out: a 16-bit tensor; in: out.numel() floats on the stream's device.
inline void to_half(const Stream& s, Tensor out, const float* in) {
  convert(s, out, Tensor(const_cast<float*>(in), out.shape).on(s.device));
}
// out: in.numel() floats on the stream's device; in: a 16-bit tensor.
inline void from_half(const Stream& s, float* out, Tensor in) { convert(s, Tensor(out, in.shape).on(s.device), in); }

}  // namespace megatrain
