// Tokenizers: text <-> token ids. The interface every tokenizer implements, the byte-level
// tokenizer (ids 0..255 are the bytes, 256 is <|endoftext|>), and a factory from a spec string
// ("bytes" or a tokenizer.json path).
// Invariant: for every tokenizer, decode(encode(text)) == text, and eod_id() < vocab_size().
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megatrain {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text`; does not append the end-of-document token.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Text of `ids`; an id outside [0, vocab_size()) throws DataError.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual int32_t eod_id() const = 0;  // appended after every document by preprocess
  // The text as encode() reads it after normalization (a tokenizer.json's NFC normalizer); the
  // text itself for a tokenizer without one. encode(normalize(x)) == encode(x).
  virtual std::string normalize(std::string_view text) const { return std::string(text); }
};

// Byte-level: id = byte value (0..255); 256 = <|endoftext|> (decodes to that literal text).
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEod = 256;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int vocab_size() const override { return 257; }
  int32_t eod_id() const override { return kEod; }
};

// "bytes" -> ByteTokenizer; anything else is the path of a Hugging Face tokenizer.json ->
// BpeTokenizer (data/bpe_tokenizer.h). A missing file throws DataError naming it.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace megatrain
