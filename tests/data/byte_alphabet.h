// The tests' own GPT-2 byte alphabet, independent of data/byte_unicode.cpp: printable Latin-1
// bytes stand for themselves, the other 68 take U+0100.. in byte order; returned as UTF-8.
#pragma once
#include <string>

namespace megatrain::test {

inline std::string sym(unsigned char byte) {
  auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
  char32_t c = byte;
  if (!printable(byte)) {
    c = 0x100;
    for (int b = 0; b < byte; ++b) c += printable(b) ? 0 : 1;
  }
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

}  // namespace megatrain::test
