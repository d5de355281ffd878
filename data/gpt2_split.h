// The GPT-2 pre-tokenizer regex (HF ByteLevel's use_regex; also common as a Split pattern) and a
// hand-written matcher of it. The matcher gives exactly the pieces PCRE2 gives for the pattern in
// UTF + UCP mode with invalid UTF-8 left in the gaps (tested on fuzzed text against Regex), at a
// fraction of the cost: preprocessing spends most of its time pre-tokenizing otherwise.
#pragma once
#include <memory>
#include <string_view>
#include <vector>

#include "data/bpe_regex.h"

namespace megatrain {

inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Gpt2Splitter final : public Splitter {
 public:
  void split_isolated(std::string_view s, std::vector<std::string_view>& out) const override;
};

// Gpt2Splitter for kGpt2Pattern as a regex, a PCRE2 Regex for any other pattern.
std::shared_ptr<const Splitter> make_splitter(std::string_view pattern, Regex::Syntax syntax,
                                              std::string_view where);

}  // namespace megatrain
