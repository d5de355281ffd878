// Character classes from PCRE2 (see unicode_class.h). [Note: lazy class table] 0x1100 blocks of
// 256 code points; a block is filled under a mutex by matching each of its code points against
// one anchored pattern, then published with a release store of its ready flag. Readers check the
// flag with an acquire load, so a filled block is read without a lock.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/unicode_class.h"

#include <pcre2.h>

#include <atomic>
#include <mutex>

#include "kernels/check.h"

namespace megatrain {
namespace {

constexpr size_t kBlocks = 0x110000 / 256;

struct Table {
  std::array<std::array<CharClass, 256>, kBlocks> classes{};
  std::array<std::atomic<bool>, kBlocks> ready{};
  std::mutex mu;
};

constinit Table g_table;  // zero-initialised storage: no guard on the lookup path

size_t encode_utf8(char32_t cp, unsigned char* out) {
  if (cp < 0x80) {
    out[0] = static_cast<unsigned char>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<unsigned char>(0xC0 | (cp >> 6));
    out[1] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<unsigned char>(0xE0 | (cp >> 12));
    out[1] = static_cast<unsigned char>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<unsigned char>(0xF0 | (cp >> 18));
  out[1] = static_cast<unsigned char>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<unsigned char>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
  return 4;
}

void fill_block(size_t block, std::array<CharClass, 256>& out) {
  constexpr std::string_view kPattern = R"((\p{L})|(\p{N})|(\s))";
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &offset, nullptr);
  MT_CHECK(code != nullptr, "PCRE2 cannot compile the character-class pattern (error {})", error);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  MT_CHECK(data != nullptr, "out of memory creating PCRE2 match data");
  for (size_t k = 0; k < 256; ++k) {
    const auto cp = static_cast<char32_t>(block * 256 + k);
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      out[k] = CharClass::kInvalid;  // surrogates are not characters; UTF-8 cannot hold them
      continue;
    }
    unsigned char bytes[4];
    const size_t n = encode_utf8(cp, bytes);
    const int rc = pcre2_match(code, bytes, n, 0, 0, data, nullptr);
    if (rc < 0) {
      out[k] = CharClass::kOther;
      continue;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
    out[k] = ov[2] != PCRE2_UNSET ? CharClass::kLetter
             : rc >= 3 && ov[4] != PCRE2_UNSET ? CharClass::kNumber
                                               : CharClass::kSpace;
  }
  pcre2_match_data_free(data);
  pcre2_code_free(code);
}

}  // namespace

size_t decode_utf8(std::string_view s, size_t i, char32_t& cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t left = s.size() - i;
  const unsigned char c = p[0];
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (left < len || p[1] < lo || p[1] > hi) return 0;
  cp = (cp << 6) | (p[1] & 0x3F);
  for (size_t k = 2; k < len; ++k) {
    if (p[k] < 0x80 || p[k] > 0xBF) return 0;
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  return len;
}

CharClass char_class(char32_t cp) {
  Table& t = g_table;
  const size_t block = cp >> 8;
  if (!t.ready[block].load(std::memory_order_acquire)) {
    std::lock_guard lock(t.mu);
    if (!t.ready[block].load(std::memory_order_relaxed)) {
      fill_block(block, t.classes[block]);
      t.ready[block].store(true, std::memory_order_release);
    }
  }
  return t.classes[block][cp & 0xFF];
}

}  // namespace megatrain
