// Rotary position embedding in the Hugging Face Llama "rotate half" convention:
// for a head vector x of size D at position t (= pos0 + row) and j < D/2, with angle a = t · inv_freq(j)
// (kernels/rope_frequencies.h) and m its attention factor (1 but for YaRN),
//   x'[j] = m·(x[j]·cos a − x[j + D/2]·sin a),   x'[j + D/2] = m·(x[j + D/2]·cos a + x[j]·sin a).
// The map is m times a rotation, so its transpose, backward, is the same map with −a. qkv is float32 or bf16
// (kernels/cpu/bf16.h): a pair is widened, rotated in float32 and each half rounded once.
#include <cmath>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu.h"

namespace megatrain::cpu {
namespace {

template <typename S>
void rope_rows(S* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& f, bool inverse, int pos0) {
  const int half = D / 2;
  const int64_t row = static_cast<int64_t>(H + 2 * Hkv) * D;
  const int rotated_heads = H + Hkv;  // q heads then k heads; v is untouched
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float cs[512], sn[512];
    for (int j = 0; j < half; ++j) {
      const double a = static_cast<double>(pos0 + t) * rope_inv_freq(f, j, D);
      cs[j] = f.attention * static_cast<float>(std::cos(a));
      sn[j] = f.attention * static_cast<float>(inverse ? -std::sin(a) : std::sin(a));
    }
    for (int b = 0; b < B; ++b) {
      S* r = qkv + (static_cast<int64_t>(b) * T + t) * row;
      for (int h = 0; h < rotated_heads; ++h) {
        S* x = r + static_cast<int64_t>(h) * D;
        for (int j = 0; j < half; ++j) {
          const float x0 = load(x[j]), x1 = load(x[j + half]);
          store(x[j], x0 * cs[j] - x1 * sn[j]);
          store(x[j + half], x1 * cs[j] + x0 * sn[j]);
        }
      }
    }
  }
}

}  // namespace

void rope_apply(float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& f, bool inverse, int pos0) {
  rope_rows(qkv, B, T, H, Hkv, D, f, inverse, pos0);
}

void rope_apply(bf16* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& f, bool inverse, int pos0) {
  rope_rows(qkv, B, T, H, Hkv, D, f, inverse, pos0);
}

}  // namespace megatrain::cpu
