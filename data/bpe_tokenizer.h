// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (GPT-2, RoBERTa, Llama-3 and
// other tiktoken-style files). encode: (1) split the text on added tokens, leftmost-longest match
// (tokens with normalized=false first, then the others, as HF does); (2) pre-tokenize each
// remaining piece with the pre_tokenizer steps (regex Split / Digits / ByteLevel's GPT-2 regex,
// all PCRE2 in UTF mode with Unicode properties, JIT when available); (3) map each piece's bytes
// to the GPT-2 byte alphabet and apply model.merges lowest rank first, leftmost first on ties.
// decode maps ids back to their bytes (added tokens to their content). The decoder and
// post_processor sections are not used: encode adds no BOS/EOS (preprocess appends eod_id()).
// The one normalizer read is NFC ({"type": "NFC"}, alone or as a Sequence's only step, as Qwen2
// and Qwen3 have it), applied as HF does: after splitting off the added tokens with
// normalized=false, before matching those with normalized=true (utf8proc; its Unicode version is
// Debian's). Unsupported settings (other normalizers, BPE dropout, subword prefixes/suffixes,
// Split behaviours other than Isolated, single_word added tokens) are rejected with DataError,
// never ignored.
// Invariants: all 256 byte symbols are in the vocab, so every byte string encodes and every id
// is < vocab_size(); decode(encode(x)) == x for every byte string x (valid UTF-8 or not) unless
// ByteLevel.add_prefix_space is set or an added token has lstrip/rstrip (HF drops text there);
// with NFC, decode(encode(x)) == normalize(x) for valid UTF-8 x, and invalid UTF-8 is refused.
// encode is thread-safe (each thread keeps its own word cache).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace megatrain {

class BpeTokenizer final : public Tokenizer {
 public:
  // Parses the tokenizer.json at `path`. A missing or malformed file, or an unsupported or
  // inconsistent field, throws DataError naming the path, the field and the fix.
  static BpeTokenizer load(const std::string& path);

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  // An id outside [0, vocab_size()) or with no token throws DataError.
  std::string decode(std::span<const int32_t> ids) const override;
  // 1 + the largest id in model.vocab and added_tokens.
  int vocab_size() const override;
  // Id of "<|endoftext|>", else "<|end_of_text|>", else "</s>"; DataError when none exists.
  int32_t eod_id() const override;
  // NFC (Unicode Normalization Form C) when the file's normalizer is NFC; DataError for invalid
  // UTF-8 then (Hugging Face's tokenizers read only valid UTF-8).
  std::string normalize(std::string_view text) const override;
  // Id of an added token's content or of a vocab entry (byte-level spelling); nullopt if none.
  std::optional<int32_t> token_id(std::string_view token) const;

 private:
  struct Impl;
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatrain
