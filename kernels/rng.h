// Counter-based random numbers (Philox-4x32-10, Salmon et al. SC'11): a value is a pure function
// of (seed, stream, index), so init, dropout and data order do not depend on sharding or on the
// order in which elements are visited. Invariant: no hidden state.
// The functions marked MT_HOST_DEVICE also run in CUDA kernels (the dropout mask on the GPU is
// then bitwise the CPU's).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"

namespace megatrain {

// Four 32-bit words, indexed like an array (a plain struct, not std::array: device code uses it).
struct RngWords {
  uint32_t w[4];
  MT_HOST_DEVICE constexpr uint32_t operator[](size_t i) const { return w[i]; }
};

MT_HOST_DEVICE inline RngWords philox4x32(RngWords ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {{static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key0, static_cast<uint32_t>(p1),
            static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key1, static_cast<uint32_t>(p0)}};
    key0 += kW0;
    key1 += kW1;
  }
  return ctr;
}

// Purposes keep independent uses of one seed apart.
enum class RngPurpose : uint32_t { init = 1, dropout = 2, data = 3, test = 4, sample = 5, compression = 6 };

struct RngKey {
  uint64_t seed = 0;
  uint32_t purpose = 0;
  uint32_t stream = 0;  // e.g. parameter index, or (layer, site) for dropout
  uint64_t offset = 0;  // added to the element index (e.g. micro-batch × elements)
};

// Four independent 32-bit words for element `index` of the stream described by `k`.
MT_HOST_DEVICE inline RngWords rng_words(const RngKey& k, uint64_t index) {
  uint64_t i = index + k.offset;
  return philox4x32({{static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), k.purpose, k.stream}},
                    static_cast<uint32_t>(k.seed), static_cast<uint32_t>(k.seed >> 32));
}

// Uniform in [0, 1) with 24 random bits.
MT_HOST_DEVICE inline float rng_uniform(const RngKey& k, uint64_t index) {
  return static_cast<float>(rng_words(k, index)[0] >> 8) * (1.0f / 16777216.0f);
}

// Standard normal (Box–Muller on two words of the same counter).
inline float rng_normal(const RngKey& k, uint64_t index) {
  auto w = rng_words(k, index);
  double u1 = (static_cast<double>(w[0]) + 1.0) / 4294967297.0;  // (0, 1]
  double u2 = static_cast<double>(w[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace megatrain
