// The GPT-2 byte-level alphabet and the small UTF-8 helpers it needs. Invariant: the two alphabet
// tables are built once and are inverse bijections between bytes and 256 code points.
#include "data/byte_unicode.h"

#include <array>

#include "kernels/check.h"

namespace megatrain {
namespace {

struct Alphabet {
  std::array<char32_t, 256> to_unicode{};
  std::array<std::string, 256> symbol;
  std::array<int16_t, 324> to_byte{};  // every code point of the alphabet is < 0x144

  Alphabet() {
    to_byte.fill(-1);
    // Bytes that are printable Latin-1 stand for themselves; the rest take U+0100.. in order.
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    };
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_unicode[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_unicode[b]] = static_cast<int16_t>(b);
      utf8_append(symbol[b], to_unicode[b]);
    }
  }
};


const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

char32_t byte_to_unicode(unsigned char b) { return alphabet().to_unicode[b]; }

int unicode_to_byte(char32_t c) {
  return c < alphabet().to_byte.size() ? alphabet().to_byte[c] : -1;
}

const std::string& byte_symbol(unsigned char b) { return alphabet().symbol[b]; }

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

int32_t utf8_next(std::string_view s, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || pos + len > s.size()) {
    ++pos;
    return -1;
  }
  int32_t c = len == 1 ? b0 : b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) {
      ++pos;
      return -1;
    }
    c = (c << 6) | (byte(pos + i) & 0x3F);
  }
  static constexpr int32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {  // overlong or not a scalar
    ++pos;
    return -1;
  }
  pos += len;
  return c;
}

size_t invalid_utf8_at(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t at = pos;
    if (utf8_next(s, pos) < 0) return at;
  }
  return std::string_view::npos;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) out += byte_symbol(static_cast<unsigned char>(b));
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    const int32_t c = utf8_next(token, pos);
    const int b = c < 0 ? -1 : unicode_to_byte(static_cast<char32_t>(c));
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
  }
  return out;
}

}  // namespace megatrain
