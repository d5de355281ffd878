// Byte tokenizer and the tokenizer factory. Invariant: ByteTokenizer round-trips any byte string.
#include "data/tokenizer.h"

#include <filesystem>
#include <system_error>

#include "data/bpe_tokenizer.h"
#include "kernels/check.h"

namespace megatrain {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id == kEod) {
      text += "<|endoftext|>";
      continue;
    }
    MT_DATA_CHECK(id >= 0 && id < 256, "token id {} is outside the byte tokenizer's vocabulary "
                   "[0, 257); the ids come from a different tokenizer or a larger vocab_size", id);
    text += static_cast<char>(static_cast<unsigned char>(id));
  }
  return text;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  MT_DATA_CHECK(std::filesystem::is_regular_file(spec, ec),
                 "tokenizer = \"{}\": no such file; use \"bytes\" (byte-level, vocab 257) or the "
                 "path of a Hugging Face tokenizer.json (byte-level BPE)", spec);
  return std::make_unique<BpeTokenizer>(BpeTokenizer::load(spec));
}

}  // namespace megatrain
