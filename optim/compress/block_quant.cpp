#include "optim/compress/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/check.h"

namespace megatrain {
namespace {

float scale_at(const uint8_t* in, int64_t b) {
  float s = 0.0f;
  std::memcpy(&s, in + 4 * b, sizeof s);
  return s;
}

template <class Store>
void unpack_with(const uint8_t* in, int64_t n, int64_t block, Store store) {
  const int64_t blocks = quant_blocks(n, block);
  const auto* codes = reinterpret_cast<const int8_t*>(in + 4 * blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    const float s = scale_at(in, b);
    const int64_t hi = std::min(n, (b + 1) * block);
    for (int64_t i = b * block; i < hi; ++i) store(i, static_cast<float>(codes[i]) * s);
  }
}

}  // namespace

int64_t quant_blocks(int64_t n, int64_t block) {
  MT_CHECK(block > 0 && n >= 0, "int8 quantization of {} values in blocks of {}", n, block);
  return (n + block - 1) / block;
}

int64_t quant_packed_bytes(int64_t n, int64_t block) { return 4 * quant_blocks(n, block) + 4 * ((n + 3) / 4); }

void quant_pack(uint8_t* out, const float* in, int64_t n, int64_t block) {
  const int64_t blocks = quant_blocks(n, block);
  auto* codes = reinterpret_cast<int8_t*>(out + 4 * blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = lo; i < hi; ++i) {
      finite = finite && std::isfinite(in[i]);
      amax = std::max(amax, std::fabs(in[i]));
    }
    const float s = finite ? amax / 127.0f : std::nanf("");
    std::memcpy(out + 4 * b, &s, sizeof s);
    for (int64_t i = lo; i < hi; ++i) {
      // The quotient in double is exact enough that rounding it picks the nearest code of x/s.
      const double q = finite && s > 0.0f ? std::nearbyint(static_cast<double>(in[i]) / s) : 0.0;
      codes[i] = static_cast<int8_t>(std::clamp(q, -127.0, 127.0));
    }
  }
  std::memset(codes + n, 0, static_cast<size_t>(quant_packed_bytes(n, block) - 4 * blocks - n));
}

void quant_unpack(float* out, const uint8_t* in, int64_t n, int64_t block) {
  unpack_with(in, n, block, [out](int64_t i, float x) { out[i] = x; });
}

void quant_unpack_add(float* out, const uint8_t* in, int64_t n, int64_t block) {
  unpack_with(in, n, block, [out](int64_t i, float x) { out[i] += x; });
}

}  // namespace megatrain
