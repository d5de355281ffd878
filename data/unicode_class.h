// UTF-8 decoding and the character classes of the GPT-2 pre-tokenizer regex, as PCRE2 sees them
// in UTF + UCP mode: \p{L}, \p{N}, \s (as kWhiteSpaceSet: [Note: White_Space]), or none of these.
// The classes are asked of PCRE2 itself, one block of 256 code points at a time on first use, so
// they follow the Unicode tables of the PCRE2 that the regex path uses. Thread-safe.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "data/byte_unicode.h"

namespace megatrain {

// [Note: White_Space] What \s means in Hugging Face's Oniguruma, tiktoken's Rust regex and HF's
// lstrip/rstrip of added tokens: Unicode's White_Space property (unchanged since Unicode 6.3), as
// the body of a PCRE2 character class. PCRE2's own \s (and \p{Xps}) also matches U+180E MONGOLIAN
// VOWEL SEPARATOR, White_Space until Unicode 6.3, so patterns use this set instead of it.
inline constexpr std::string_view kWhiteSpaceSet =
    R"(\x{9}-\x{d}\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f})"
    R"(\x{3000})";

enum class CharClass : uint8_t {
  kLetter,  // \p{L}
  kNumber,  // \p{N}
  kSpace,   // \s: kWhiteSpaceSet
  kOther,   // [^\s\p{L}\p{N}]
  kInvalid  // not well-formed UTF-8: matches no pattern item (PCRE2_MATCH_INVALID_UTF)
};

// The class of code point `cp` (a Unicode scalar value, < 0x110000, not a surrogate), from PCRE2.
CharClass char_class(char32_t cp);

// The classes of the ASCII characters, the same as char_class gives (tested), without the lookup:
// letters, digits, and \t \n \v \f \r and ' ' as \s.
inline constexpr auto kAsciiClass = [] {
  std::array<CharClass, 128> c{};
  for (int b = 0; b < 128; ++b) {
    c[b] = ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') ? CharClass::kLetter
           : (b >= '0' && b <= '9')                 ? CharClass::kNumber
           : (b == ' ' || (b >= '\t' && b <= '\r')) ? CharClass::kSpace
                                                    : CharClass::kOther;
  }
  return c;
}();

// The class of the character at s[i] and its length (1 for an invalid byte: utf8_next's rules).
// i < s.size().
inline CharClass class_at(std::string_view s, size_t i, size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    len = 1;
    return kAsciiClass[b];
  }
  size_t end = i;
  const int32_t cp = utf8_next(s, end);
  len = end - i;
  return cp < 0 ? CharClass::kInvalid : char_class(static_cast<char32_t>(cp));
}

}  // namespace megatrain
