// Vectorisable scalar math for the CPU kernels: branch-free so GCC turns loops calling these into
// AVX-512 (or AVX2/SSE) code. fast_exp is accurate to ~2 ulp over the float range and returns
// exactly 0 below −87.3 (so masked logits vanish).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace megatrain::cpu {

inline float fast_exp(float x) {
  // Ternaries, not std::fmin/fmax: GCC vectorises these selects but calls fminf for the others.
  const float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;  // ln 2 split in two for an exact reduction
  r = r + n * 2.12194440e-4f;
  // exp(r) on |r| ≤ ln2/2, Cephes expf polynomial.
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  const float scale = std::bit_cast<float>(e);
  return x < -87.3f ? 0.0f : p * scale;
}

// tanh through exp: 1 − 2 / (exp(2u) + 1); saturates cleanly for large |u|.
inline float fast_tanh(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }

inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

}  // namespace megatrain::cpu
