// Character classes from PCRE2 (see unicode_class.h). [Note: lazy class table] 0x1100 blocks of
// 256 code points; a block is filled under a mutex by matching each of its code points against
// one anchored pattern, then published with a release store of its ready flag. Readers check the
// flag with an acquire load, so a filled block is read without a lock.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/unicode_class.h"

#include <pcre2.h>

#include <atomic>
#include <mutex>
#include <string>

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

void fill_block(size_t block, std::array<CharClass, 256>& out) {
  const std::string pattern = fmt::format(R"((\p{{L}})|(\p{{N}})|([{}]))", kWhiteSpaceSet);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
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
    std::string text;
    utf8_append(text, cp);
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data, nullptr);
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
