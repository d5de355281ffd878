#include "checkpoint/crc32.h"

#include <libdeflate.h>
#include <zlib.h>

namespace megatrain {

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) { return libdeflate_crc32(crc, data, bytes); }

uint32_t crc32_combine_pieces(uint32_t crc_a, uint32_t crc_b, int64_t bytes_b) {
  return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(bytes_b)));
}

}  // namespace megatrain
