// bfloat16 as raw bits: the upper half of an IEEE-754 float32 (sign, the same 8-bit exponent, 7
// mantissa bits), so it covers float32's range with 8 bits of precision. Conversion from float32
// rounds to nearest, ties to even (as oneDNN, PyTorch and the AVX512-BF16 instructions do); a NaN
// stays a NaN (quiet, sign kept); values past bfloat16's largest finite one round to infinity.
#pragma once
#include <cstdint>
#include <cstring>

namespace megatrain {

inline uint16_t bf16_from_f32(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: set the quiet bit
  u += 0x7fffu + ((u >> 16) & 1u);  // round half to even on the 16 bits dropped
  return static_cast<uint16_t>(u >> 16);
}

inline float f32_from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x = 0.0f;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace megatrain
