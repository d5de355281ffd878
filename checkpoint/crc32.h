// CRC-32 (the polynomial of zlib, gzip and PNG; docs/checkpoint-format.md) of checkpoint tensors,
// files and memory snapshots, through libdeflate's folding CRC (PCLMULQDQ/AVX where the CPU has them,
// ~4-9 GB/s here against zlib 1.2's 1.7-2 GB/s): the same values as zlib's crc32(), so every format
// that stores one is unchanged. Pass a previous result as `crc` to continue across pieces (0 starts).
#pragma once
#include <cstddef>
#include <cstdint>

namespace megatrain {

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);
// The CRC of A followed by B from crc(A), crc(B) and B's length (zlib's crc32_combine: ranks CRC
// their pieces of a tensor, rank 0 joins them in order; combine(0, c, n) = c).
uint32_t crc32_combine_pieces(uint32_t crc_a, uint32_t crc_b, int64_t bytes_b);

}  // namespace megatrain
