// Elementwise CPU ops: residual add, counter-based dropout, sum of squares, scaling.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu.h"

namespace megatrain::cpu {

void add_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void dropout_apply(float* x, int64_t n, float p, const RngKey& key) {
  const float keep_scale = 1.0f / (1.0f - p);
  const uint32_t threshold = static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
  // Four mask bits' worth of randomness per Philox call: element i is global element
  // g = key.offset + i, which uses word g % 4 of counter g / 4 — so a buffer holding a slice of the
  // elements (a sequence-parallel shard) draws exactly the slice's bits of the whole mask.
  RngKey counters = key;
  counters.offset = 0;
  const auto first = static_cast<int64_t>(key.offset);
  const int64_t c0 = first / 4, c1 = (first + n + 3) / 4;
#pragma omp parallel for schedule(static)
  for (int64_t c = c0; c < c1; ++c) {
    const auto w = rng_words(counters, static_cast<uint64_t>(c));
    for (int k = 0; k < 4; ++k) {
      const int64_t i = c * 4 + k - first;
      if (i >= 0 && i < n) x[i] = w[static_cast<size_t>(k)] < threshold ? 0.0f : x[i] * keep_scale;
    }
  }
}

// A fixed number of contiguous chunks, each summed in order, then the chunk sums in order: the
// result does not depend on the thread count, and nothing is allocated.
double sum_squares(const float* x, int64_t n) {
  constexpr int kChunks = 256;
  const int64_t chunk = (n + kChunks - 1) / kChunks;
  double partial[kChunks] = {};
#pragma omp parallel for schedule(static)
  for (int c = 0; c < kChunks; ++c) {
    const int64_t begin = c * chunk, end = std::min(n, begin + chunk);
    double acc = 0.0;
    for (int64_t i0 = begin; i0 < end; i0 += 4096) {  // float lanes per 4096, then into double
      float part = 0.0f;
      const int64_t i1 = std::min(end, i0 + 4096);
#pragma omp simd reduction(+ : part)
      for (int64_t i = i0; i < i1; ++i) part += x[i] * x[i];
      acc += part;
    }
    partial[c] = acc;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void scale_inplace(float* x, int64_t n, float factor) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

bool all_finite(const float* x, int64_t n) {
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) bad |= std::isfinite(x[i]) ? 0 : 1;
  return bad == 0;
}

void zero_fill(void* x, size_t bytes) {
  auto* b = static_cast<unsigned char*>(x);
  const auto n = static_cast<int64_t>(bytes);
  constexpr int64_t kPiece = int64_t{1} << 16;  // pieces, so that every thread touches its own pages
#pragma omp parallel for schedule(static)
  for (int64_t at = 0; at < n; at += kPiece) std::memset(b + at, 0, static_cast<size_t>(std::min(kPiece, n - at)));
}

}  // namespace megatrain::cpu
