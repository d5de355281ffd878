// The GPT-2 byte alphabet of byte-level BPE, and UTF-8 helpers. In the
// alphabet each byte 0..255 stands for one printable Unicode character, so any byte string becomes
// a string of visible characters (what vocabs hold). Printable Latin-1 bytes ('!'..'~',
// U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68 bytes take U+0100.. in byte
// order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ'). Invariant: byte_to_unicode is a bijection from
// bytes onto 256 code points; unicode_to_byte and byte_level_decode invert it, so
// byte_level_decode(byte_level_encode(x)) == x for every x.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>


namespace megatrain {

char32_t byte_to_unicode(unsigned char b);
// The byte that `c` stands for, or -1 when `c` is not in the alphabet.
int unicode_to_byte(char32_t c);
// UTF-8 text of byte_to_unicode(b).
const std::string& byte_symbol(unsigned char b);

// Appends the UTF-8 encoding of `c`.
void utf8_append(std::string& out, char32_t c);
// Code point of the UTF-8 sequence at s[pos]; advances pos past it. A malformed or truncated
// sequence yields -1 and advances pos by one byte.
int32_t utf8_next(std::string_view s, size_t& pos);
// Index of the first byte of `s` that is not part of well-formed UTF-8 (utf8_next's rules), or
// npos when all of it is valid.
size_t invalid_utf8_at(std::string_view s);

// Each byte of `bytes` replaced by its symbol.
std::string byte_level_encode(std::string_view bytes);
// The bytes a byte-level token stands for; nullopt when a character is outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view token);

}  // namespace megatrain
