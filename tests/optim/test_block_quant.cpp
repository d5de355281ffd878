// The int8 block quantizer (optim/compress/block_quant.h): the packed byte layout byte for byte, the
// round trip within half a scale per element over odd sizes and tails, all-zero and non-finite
// blocks, and unpack_add as one term of a sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "optim/compress/block_quant.h"

namespace megatrain {
namespace {

std::vector<float> seeded(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

float scale_of(const std::vector<uint8_t>& packed, int64_t b) {
  float s = 0.0f;
  std::memcpy(&s, packed.data() + 4 * b, 4);
  return s;
}

TEST(BlockQuant, PackedBytesAreScalesThenCodesPaddedToWords) {
  EXPECT_EQ(quant_packed_bytes(0, 4), 0);
  EXPECT_EQ(quant_packed_bytes(1, 4), 4 + 4);
  EXPECT_EQ(quant_packed_bytes(8, 4), 8 + 8);
  EXPECT_EQ(quant_packed_bytes(9, 4), 12 + 12);
  EXPECT_EQ(quant_packed_bytes(1000, 256), 16 + 1000);
  EXPECT_EQ(quant_packed_bytes(1001, 256), 16 + 1004);
  // Two blocks of 3 (max 127 and 2·127) and a tail of 1: scales 1, 2, 0.5; codes x/s.
  const std::vector<float> x = {127.0f, -1.6f, 3.0f, 254.0f, -254.0f, 5.0f, -0.5f};
  std::vector<uint8_t> packed(static_cast<size_t>(quant_packed_bytes(7, 3)), 0xAB);
  ASSERT_EQ(packed.size(), 12u + 8u);
  quant_pack(packed.data(), x.data(), 7, 3);
  std::vector<uint8_t> want(20, 0);
  const float scales[3] = {1.0f, 2.0f, 0.5f / 127.0f};
  std::memcpy(want.data(), scales, 12);
  const int8_t codes[7] = {127, -2, 3, 127, -127, 2, -127};  // nearest; 5/2 = 2.5 rounds to even
  std::memcpy(want.data() + 12, codes, 7);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(packed[i], want[i]) << "byte " << i;
}

TEST(BlockQuant, RoundTripIsWithinHalfAScalePerElement) {
  for (const int64_t block : {1, 7, 64, 256}) {
    for (const int64_t n : {1, 5, 255, 256, 257, 1000, 4099}) {
      const std::vector<float> x = seeded(n, static_cast<uint32_t>(n * 31 + block));
      std::vector<uint8_t> packed(static_cast<size_t>(quant_packed_bytes(n, block)));
      quant_pack(packed.data(), x.data(), n, block);
      std::vector<float> y(static_cast<size_t>(n));
      quant_unpack(y.data(), packed.data(), n, block);
      for (int64_t i = 0; i < n; ++i) {
        const float s = scale_of(packed, i / block);
        const double slack = std::ldexp(std::fabs(static_cast<double>(y[i])), -24);  // q·s rounded
        ASSERT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), s / 2.0 + slack)
            << "n " << n << " block " << block << " element " << i;
      }
      // The largest value of each block comes back exactly (code ±127).
      for (int64_t b = 0; b < quant_blocks(n, block); ++b) {
        int64_t at = b * block;
        for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
          if (std::fabs(x[i]) > std::fabs(x[at])) at = i;
        EXPECT_EQ(std::fabs(y[at]), scale_of(packed, b) * 127.0f) << "block " << b;
      }
    }
  }
}

TEST(BlockQuant, ZeroBlocksAreExactAndNonFiniteBlocksBecomeNan) {
  std::vector<float> x(10, 0.0f);
  x[7] = INFINITY;  // block [6, 9) with block 3
  x[9] = 1.0f;      // the tail
  std::vector<uint8_t> packed(static_cast<size_t>(quant_packed_bytes(10, 3)));
  quant_pack(packed.data(), x.data(), 10, 3);
  EXPECT_EQ(scale_of(packed, 0), 0.0f);
  EXPECT_TRUE(std::isnan(scale_of(packed, 2)));
  std::vector<float> y(10, -1.0f);
  quant_unpack(y.data(), packed.data(), 10, 3);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], 0.0f) << i;
  for (int i = 6; i < 9; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  EXPECT_EQ(y[9], 1.0f);
}

TEST(BlockQuant, UnpackAddAddsTheDequantizedValues) {
  const int64_t n = 300;
  const std::vector<float> x = seeded(n, 3), acc0 = seeded(n, 4);
  std::vector<uint8_t> packed(static_cast<size_t>(quant_packed_bytes(n, 64)));
  quant_pack(packed.data(), x.data(), n, 64);
  std::vector<float> y(static_cast<size_t>(n)), acc = acc0;
  quant_unpack(y.data(), packed.data(), n, 64);
  quant_unpack_add(acc.data(), packed.data(), n, 64);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], acc0[i] + y[i]) << i;
}

}  // namespace
}  // namespace megatrain
