#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/bpe_regex.h"

#include <pcre2.h>

#include <algorithm>
#include <string>

#include "data/unicode_class.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

// `pattern` with each \s replaced by the White_Space class and each \S outside [...] by its
// complement ([Note: White_Space]); \Q...\E quotes and [:posix:] items are copied as they are.
// A \S inside [...] keeps PCRE2's meaning (it differs from White_Space's complement in U+180E).
std::string with_white_space(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  size_t class_body = 0;  // where the current class's items start: a ']' there is literal
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (c == '\\' && next == 'Q') {
      const size_t end = std::min(pattern.find("\\E", i + 2), pattern.size());
      out.append(pattern.substr(i, end + 2 - i));
      i = end + 1;
    } else if (c == '\\' && next == 's') {
      out += in_class ? std::string(kWhiteSpaceSet) : fmt::format("[{}]", kWhiteSpaceSet);
      ++i;
    } else if (c == '\\' && next == 'S' && !in_class) {
      out += fmt::format("[^{}]", kWhiteSpaceSet);
      ++i;
    } else if (c == '\\') {
      out.append(pattern.substr(i, 2));
      ++i;
    } else if (in_class && c == '[' && next == ':') {
      const size_t end = std::min(pattern.find(":]", i + 2), pattern.size());
      out.append(pattern.substr(i, end + 2 - i));
      i = end + 1;
    } else {
      if (!in_class && c == '[') {
        in_class = true;
        class_body = i + (next == '^' ? 2 : 1);
      } else if (in_class && c == ']' && i != class_body) {
        in_class = false;
      }
      out += c;
    }
  }
  return out;
}

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

}  // namespace

Regex::Regex(std::string_view pattern, Syntax syntax, std::string_view where) {
  // Invalid UTF-8 in the subject never matches (it falls into the gaps between matches).
  const uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF |
                           (syntax == Syntax::kLiteral ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string text =
      syntax == Syntax::kLiteral ? std::string(pattern) : with_white_space(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), options, &error,
                        &offset, nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    const std::string form = text == pattern ? "" : fmt::format(" of its PCRE2 form '{}'", text);
    throw DataError(fmt::format("{} '{}' does not compile at offset {}{}: {}; fix the pattern",
                                 where, pattern, offset, form,
                                 reinterpret_cast<const char*>(message)));
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;  // else pcre2_match interprets
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::split_isolated(std::string_view s, std::vector<std::string_view>& out) const {
  thread_local MatchScratch scratch;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0, last = 0;
  while (pos < s.size()) {
    const int rc = (jit_ ? pcre2_jit_match : pcre2_match)(code_, subject, s.size(), pos, 0,
                                                          scratch.data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    MT_CHECK(rc >= 0, "pcre2_match failed with error {} on a {}-byte piece", rc, s.size());
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end <= begin) {  // empty match: retry one character further on
      pos = begin + 1;
      while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > last) out.push_back(s.substr(last, begin - last));
    out.push_back(s.substr(begin, end - begin));
    last = pos = end;
  }
  if (last < s.size()) out.push_back(s.substr(last));
}

}  // namespace megatrain
