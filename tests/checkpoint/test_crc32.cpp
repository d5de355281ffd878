// checkpoint/crc32.h gives zlib's CRC-32 — the value every checkpoint, manifest and memory snapshot
// stores — for whole buffers, continued across pieces and joined from pieces' CRCs, so switching
// the implementation changed no format: the standard check value of "123456789" (0xCBF43926), and
// zlib's crc32() as the reference on random buffers of awkward lengths (1 byte, around the 16- and
// 64-byte blocks a folding CRC works in, several MiB), cut anywhere.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "checkpoint/crc32.h"

namespace megatrain {
namespace {

uint32_t zlib_crc(const unsigned char* p, size_t n, uint32_t crc = 0) {
  return static_cast<uint32_t>(crc32(crc, p, static_cast<uInt>(n)));
}

TEST(Crc32, IsTheStandardCrc32) {
  constexpr std::string_view check = "123456789";
  EXPECT_EQ(crc32_update(0, check.data(), check.size()), 0xCBF43926u);
  EXPECT_EQ(crc32_update(0, nullptr, 0), 0u);
}

TEST(Crc32, EqualsZlibWholeAndInPieces) {
  for (const size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{63}, size_t{64}, size_t{65},
                         size_t{1000}, size_t{(5u << 20) + 3}}) {
    std::mt19937 gen(static_cast<uint32_t>(n));
    std::vector<unsigned char> bytes(n);
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(gen() >> 24);
    const uint32_t want = zlib_crc(bytes.data(), n);
    EXPECT_EQ(crc32_update(0, bytes.data(), n), want) << n << " bytes";
    for (const size_t cut : {size_t{0}, n / 3, n - 1}) {
      const uint32_t head = crc32_update(0, bytes.data(), cut);
      EXPECT_EQ(head, zlib_crc(bytes.data(), cut)) << n << " bytes, first " << cut;
      EXPECT_EQ(crc32_update(head, bytes.data() + cut, n - cut), want) << n << " bytes, cut at " << cut;
      const uint32_t tail = crc32_update(0, bytes.data() + cut, n - cut);
      EXPECT_EQ(crc32_combine_pieces(head, tail, static_cast<int64_t>(n - cut)), want) << n << " bytes, joined at " << cut;
    }
  }
}

}  // namespace
}  // namespace megatrain
