// Elementwise CPU ops: residual add, counter-based dropout, sum of squares, scaling.
#include <vector>

#include "kernels/cpu/cpu.h"

namespace megatrain::cpu {

void add_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void dropout_apply(float* x, int64_t n, float p, const RngKey& key) {
  const float keep_scale = 1.0f / (1.0f - p);
  const uint32_t threshold = static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
  // Four mask bits' worth of randomness per Philox call: element i uses word i % 4 of counter i / 4.
#pragma omp parallel for schedule(static)
  for (int64_t i4 = 0; i4 < (n + 3) / 4; ++i4) {
    const auto w = rng_words(key, static_cast<uint64_t>(i4));
    for (int k = 0; k < 4; ++k) {
      const int64_t i = i4 * 4 + k;
      if (i < n) x[i] = w[static_cast<size_t>(k)] < threshold ? 0.0f : x[i] * keep_scale;
    }
  }
}

// Blocks of fixed size summed in order: the result does not depend on the thread count.
double sum_squares(const float* x, int64_t n) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(nb));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t end = (b + 1) * kBlock < n ? (b + 1) * kBlock : n;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = b * kBlock; i < end; ++i) acc += x[i] * x[i];
    partial[static_cast<size_t>(b)] = acc;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void scale_inplace(float* x, int64_t n, float factor) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace megatrain::cpu
