// Building blocks of byte-level BPE: the GPT-2 byte alphabet, UTF-8 helpers, the PCRE2 regex
// splitter of pre-tokenization, and the merge table that applies BPE merges by rank. In the
// alphabet each byte 0..255 stands for one printable Unicode character, so any byte string becomes
// a string of visible characters (what vocabs hold). Printable Latin-1 bytes ('!'..'~',
// U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68 bytes take U+0100.. in byte
// order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ'). Invariant: byte_to_unicode is a bijection from
// bytes onto 256 code points; unicode_to_byte and byte_level_decode invert it, so
// byte_level_decode(byte_level_encode(x)) == x for every x; and Regex::split_isolated's pieces
// concatenate back to its input; MergeTable::apply only joins adjacent symbols, so the bytes its
// output stands for are the bytes of its input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

struct pcre2_real_code_8;  // pcre2.h's compiled pattern (8-bit code units)

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

// Each byte of `bytes` replaced by its symbol.
std::string byte_level_encode(std::string_view bytes);
// The bytes a byte-level token stands for; nullopt when a character is outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view token);

// A PCRE2 pattern compiled in UTF mode with Unicode properties (\s, \p{L}, caseless matching
// are all Unicode, as in HF's Oniguruma), JIT-compiled when the library supports it and
// interpreted otherwise. Invalid UTF-8 in a subject never matches. Shared read-only by threads.
class Regex {
 public:
  enum class Syntax { kRegex, kLiteral };
  // A pattern that does not compile throws InputError "<where> '<pattern>' does not compile...".
  Regex(std::string_view pattern, Syntax syntax, std::string_view where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // HF's "Isolated" split: appends each match and each non-empty gap between matches, in order.
  void split_isolated(std::string_view s, std::vector<std::string>& out) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

// BPE merge rules: (left id, right id) -> (rank, merged id).
class MergeTable {
 public:
  // A later rule for the same pair replaces the earlier one (as HF's merge map does).
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // Merges `symbols` (one id per byte) and appends the resulting ids to `out`.
  // [Note: BPE merge order] Repeatedly merge the adjacent pair of lowest rank, the leftmost one
  // on ties, until no adjacent pair has a rule (HF's BPE::merge_word; same result as GPT-2's).
  void apply(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const;

 private:
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> rules_;
};

}  // namespace megatrain
