// 16-bit floats as raw bits, for mixed-precision compute and for checkpoint and interchange files:
// bfloat16 (the top half of an IEEE float32: its 8-bit exponent, 7 mantissa bits) and IEEE 754
// binary16 ("half", fp16: 1 sign, 5 exponent, 10 mantissa bits).
// Invariant: float → 16-bit rounds to nearest, ties to even; values too large become ±inf, values
// too small become signed zero, fp16 subnormals are produced and read exactly; NaN stays a (quiet)
// NaN and keeps its sign. 16-bit → float is exact (every bf16 and fp16 value is a float).
// Every function here also runs in CUDA kernels (MT_HOST_DEVICE), so the GPU rounds bitwise as the
// CPU does; hence __builtin_bit_cast (what std::bit_cast is built on), as nvcc compiles C++17.
#pragma once
#include <cstdint>

#include "kernels/host_device.h"

namespace megatrain {

MT_HOST_DEVICE inline float bf16_to_float(uint16_t h) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(h) << 16);
}

MT_HOST_DEVICE inline uint16_t float_to_bf16(float f) {
  uint32_t x = __builtin_bit_cast(uint32_t, f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  uint32_t lsb = (x >> 16) & 1u;  // ties go to the even neighbour
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);  // a carry into the exponent is correct
}

MT_HOST_DEVICE inline float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24, exact in float
    float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return __builtin_bit_cast(float, sign | 0x7f800000u | (mant << 13));  // inf / NaN
  return __builtin_bit_cast(float, sign | ((exp + 112u) << 23) | (mant << 13));        // rebias 15 → 127
}

MT_HOST_DEVICE inline uint16_t float_to_fp16(float f) {
  uint32_t x = __builtin_bit_cast(uint32_t, f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf, or NaN made quiet with the top payload bits kept
    return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x0200u | ((ax >> 13) & 0x3ffu) : 0u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // ≥ 65520 rounds to inf
  uint32_t result, rem, halfway;
  if (ax >= 0x38800000u) {  // normal in fp16 (≥ 2^-14): rebias the exponent, drop 13 bits
    result = (ax - 0x38000000u) >> 13;
    rem = ax & 0x1fffu;
    halfway = 0x1000u;
  } else if (ax >= 0x33000000u) {  // subnormal in fp16 (≥ 2^-25 before rounding): units of 2^-24
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - (ax >> 23);  // 14..24
    result = mant >> shift;
    rem = mant & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1u);
  } else {
    return sign;  // below half the smallest subnormal: signed zero
  }
  if (rem > halfway || (rem == halfway && (result & 1u))) ++result;  // may carry into the exponent
  return static_cast<uint16_t>(sign | result);
}

}  // namespace megatrain
