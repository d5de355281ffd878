// How `megatrain preprocess` turns one document it read into tokens (and, for the formats with a
// loss mask, whether each token is learned) — one encoder per format, chosen once (rules of each
// format in preprocess.h). Each worker thread owns its encoder, so an encoder needs no locks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/preprocess.h"

namespace megatrain {

class Tokenizer;

// What the reader hands a worker: the document's text (in chat mode the JSONL line itself), the
// prompt in prompt-completion mode, and FILE:LINE in the JSONL formats (empty otherwise).
struct ReadDocument {
  std::string text, prompt, origin;
};

class DocumentEncoder {
 public:
  virtual ~DocumentEncoder() = default;
  // True when the format writes PREFIX.lossmask (and encode fills LEARNED).
  virtual bool masks() const = 0;
  // Appends the document's tokens, EOD last, to TOKENS (and as many flags to LEARNED). DataError
  // without file or line for a document of this format that cannot be encoded (the caller names
  // the origin, and skips it under --skip-bad-lines).
  virtual void encode(const ReadDocument& doc, std::vector<int32_t>& tokens, std::vector<uint8_t>& learned) const = 0;
};

// For OPTIONS.format; in chat mode it reads OPTIONS.chat_config (DataError naming it when unusable).
std::unique_ptr<DocumentEncoder> make_document_encoder(const PreprocessOptions& options, const Tokenizer& tok);

}  // namespace megatrain
