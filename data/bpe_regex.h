// The splitters of byte-level BPE pre-tokenization: the interface, and its PCRE2 implementation for
// any pattern. Invariant: split_isolated's pieces concatenate back to its input.
#pragma once
#include <string_view>
#include <vector>

struct pcre2_real_code_8;  // pcre2.h's compiled pattern (8-bit code units)

namespace megatrain {

// HF's "Isolated" split by a pattern: appends each match and each non-empty gap between matches,
// in order, as views into `s`. Shared read-only by threads.
class Splitter {
 public:
  virtual ~Splitter() = default;
  virtual void split_isolated(std::string_view s, std::vector<std::string_view>& out) const = 0;
};

// A PCRE2 pattern compiled in UTF mode with Unicode properties (\s, \p{L}, caseless matching
// are all Unicode, as in HF's Oniguruma), JIT-compiled when the library supports it and
// interpreted otherwise. Invalid UTF-8 in a subject never matches. Shared read-only by threads.
class Regex final : public Splitter {
 public:
  enum class Syntax { kRegex, kLiteral };
  // A pattern that does not compile throws DataError "<where> '<pattern>' does not compile...".
  Regex(std::string_view pattern, Syntax syntax, std::string_view where);
  ~Regex() override;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  void split_isolated(std::string_view s, std::vector<std::string_view>& out) const override;

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;  // JIT-compiled: matched with pcre2_jit_match, which skips the checks
};

}  // namespace megatrain
