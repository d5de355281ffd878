// [Note: GPT-2 split] How PCRE2 matches kGpt2Pattern, alternative by alternative, at position i
// (every well-formed character matches some alternative, so a match starts at every character
// that follows the previous match; invalid bytes match nothing and stay in the gaps):
//   1. 's 't 're 've 'm 'll 'd (case-sensitive);
//   2-4. an optional ' ' then a maximal run of letters, of numbers, or of "others" (neither space,
//        letter nor number); the class of the run is that of its first character;
//   5. \s+(?!\S): a maximal whitespace run if the run ends the text or an invalid byte follows it,
//      else (a non-space character follows) the run without its last character, if that leaves
//      one;
//   6. \s+: the whole run (a single whitespace character before a non-space one).
#include "data/gpt2_split.h"

#include "data/unicode_class.h"

namespace megatrain {
namespace {

// Length of the contraction (alternative 1) at s[i] == '\'', or 0.
size_t contraction(std::string_view s, size_t i) {
  const size_t left = s.size() - i - 1;
  if (left >= 1) {
    const char a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  }
  if (left >= 2) {
    const char a = s[i + 1], b = s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// End of the maximal run of class `c` that starts at s[i].
size_t run_end(std::string_view s, size_t i, CharClass c) {
  size_t len = 0;
  while (i < s.size() && class_at(s, i, len) == c) i += len;
  return i;
}

}  // namespace

void Gpt2Splitter::split_isolated(std::string_view s, std::vector<std::string_view>& out) const {
  const size_t n = s.size();
  size_t i = 0, gap = 0;  // gap: start of the invalid bytes not yet emitted
  while (i < n) {
    size_t len = 0;
    const CharClass c = class_at(s, i, len);
    if (c == CharClass::kInvalid) {
      i += len;
      continue;
    }
    if (gap < i) out.push_back(s.substr(gap, i - gap));
    size_t end = 0;
    if (s[i] == '\'' && contraction(s, i) > 0) {
      end = i + contraction(s, i);
    } else if (c != CharClass::kSpace) {
      end = run_end(s, i + len, c);
    } else {
      size_t next_len = 0;
      const CharClass next = i + 1 < n && s[i] == ' ' ? class_at(s, i + 1, next_len) : CharClass::kSpace;
      if (next != CharClass::kSpace && next != CharClass::kInvalid) {
        end = run_end(s, i + 1 + next_len, next);  // ' ' + a run (alternatives 2-4)
      } else {
        size_t last = i;  // start of the run's last character
        end = i;
        size_t k = 0;
        while (end < n && class_at(s, end, k) == CharClass::kSpace) {
          last = end;
          end += k;
        }
        const bool non_space_follows = end < n && class_at(s, end, k) != CharClass::kInvalid;
        if (non_space_follows && last > i) end = last;  // alternative 5 gives back one character
      }
    }
    out.push_back(s.substr(i, end - i));
    i = gap = end;
  }
  if (gap < n) out.push_back(s.substr(gap));
}

std::shared_ptr<const Splitter> make_splitter(std::string_view pattern, Regex::Syntax syntax,
                                              std::string_view where) {
  if (syntax == Regex::Syntax::kRegex && pattern == kGpt2Pattern) return std::make_shared<Gpt2Splitter>();
  return std::make_shared<Regex>(pattern, syntax, where);
}

}  // namespace megatrain
