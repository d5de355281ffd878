#include "kernels/cpu/convert.h"

#include "kernels/check.h"
#include "kernels/half.h"

namespace megatrain::cpu {
namespace {

void check_half(Precision p) { MT_CHECK(p != Precision::fp32, "16-bit conversion asked for fp32"); }

}  // namespace

void f32_to_half(Precision p, uint16_t* out, const float* inp, int64_t n) {
  check_half(p);
  if (p == Precision::bf16) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(inp[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_fp16(inp[i]);
  }
}

void half_to_f32(Precision p, float* out, const uint16_t* inp, int64_t n) {
  check_half(p);
  if (p == Precision::bf16) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(inp[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_float(inp[i]);
  }
}

void round_to_half(Precision p, float* out, const float* inp, int64_t n) {
  check_half(p);
  if (p == Precision::bf16) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(float_to_bf16(inp[i]));
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_float(float_to_fp16(inp[i]));
  }
}

}  // namespace megatrain::cpu
