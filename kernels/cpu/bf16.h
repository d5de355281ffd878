// bfloat16 storage for the CPU kernels' activations: a distinct element type, so that a kernel
// templated on its storage (float or bf16) reads and writes either with the same float32 math, and
// an overload taking bf16* cannot be handed fp16 bits or floats by mistake.
// load() widens (exact), store() rounds to nearest, ties to even (kernels/half.h's bits). Both are
// branch-free, so loops over them vectorise: with AVX2 a widen is a zero-extend and a shift, a
// rounding an add, a shift and a NaN select (AVX512-BF16's vcvtneps2bf16 gives the same bits).
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/half.h"

namespace megatrain::cpu {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);

inline float load(float x) { return x; }
inline float load(bf16 x) { return bf16_to_float(x.bits); }
inline void store(float& dst, float v) { dst = v; }
inline void store(bf16& dst, float v) { dst.bits = float_to_bf16(v); }

}  // namespace megatrain::cpu
