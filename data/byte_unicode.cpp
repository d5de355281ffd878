// The GPT-2 byte-level alphabet, the small UTF-8 helpers it needs, the PCRE2 splitter and the BPE
// merge table. Invariant: the two alphabet tables are built once and are inverse bijections
// between bytes and 256 code points; split_isolated loses no byte; apply only joins neighbours.
#include "data/byte_unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <functional>
#include <queue>

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

// Per-thread PCRE2 match state: match data and a JIT stack big enough for long whitespace runs.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchScratch() {
    MT_CHECK(data != nullptr && context != nullptr, "out of memory creating PCRE2 match data");
    if (stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);  // null: no JIT
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
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

Regex::Regex(std::string_view pattern, Syntax syntax, std::string_view where) {
  // Invalid UTF-8 in the subject never matches (it falls into the gaps between matches).
  const uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF |
                           (syntax == Syntax::kLiteral ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                        &error, &offset, nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw InputError(fmt::format("{} '{}' does not compile at offset {}: {}; fix the pattern",
                                 where, pattern, offset, reinterpret_cast<const char*>(message)));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // on failure pcre2_match interprets
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::split_isolated(std::string_view s, std::vector<std::string>& out) const {
  thread_local MatchScratch scratch;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0, last = 0;
  while (pos < s.size()) {
    const int rc = pcre2_match(code_, subject, s.size(), pos, 0, scratch.data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    MT_CHECK(rc >= 0, "pcre2_match failed with error {} on a {}-byte piece", rc, s.size());
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end <= begin) {  // empty match: retry one character further on
      pos = begin + 1;
      while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > last) out.emplace_back(s.substr(last, begin - last));
    out.emplace_back(s.substr(begin, end - begin));
    last = pos = end;
  }
  if (last < s.size()) out.emplace_back(s.substr(last));
}

namespace {
uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

void MergeTable::add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  rules_.insert_or_assign(pair_key(left, right), std::pair{rank, merged});
}

// [Note: BPE merge order] The symbols form a linked list; a heap holds candidate pairs ordered by
// (rank, position). An entry whose symbols have changed since it was pushed is stale and skipped.
void MergeTable::apply(const std::vector<int32_t>& ids, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;      // -1: absorbed into its left neighbour
    int prev, next;  // -1: none
  };
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int n = static_cast<int>(ids.size());
  std::vector<Symbol> symbols(n);
  for (int i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int pos) {
    const int next = symbols[pos].next;
    if (next < 0) return;
    auto it = rules_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it != rules_.end())
      heap.push({it->second.first, pos, symbols[pos].id, symbols[next].id, it->second.second});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = symbols[c.pos];
    if (s.id != c.left || s.next < 0 || symbols[s.next].id != c.right) continue;  // stale
    s.id = c.merged;
    symbols[s.next].id = -1;  // absorbed: every entry naming it is now stale
    s.next = symbols[s.next].next;
    if (s.next >= 0) symbols[s.next].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  for (int i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace megatrain
