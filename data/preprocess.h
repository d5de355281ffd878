// Text files -> Megatron indexed dataset (`megatrain preprocess`).
//
// Documents: each input file is one document, unless doc_separator is set: then a line exactly
// equal to it (without its newline) ends a document; the separator line is part of no document.
// A document's text is kept exactly, including its final newline. Empty documents are skipped.
// Every document is encoded and followed by the tokenizer's EOD token, and written as one
// sequence; dtype = smallest_token_dtype(vocab_size).
//
// Invariant: the output appears only complete (IndexedDatasetWriter renames temporary files).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megatrain {

struct PreprocessOptions {
  std::vector<std::string> inputs;           // text files, read in this order
  std::string tokenizer = "bytes";           // make_tokenizer spec
  std::string output_prefix;                 // writes PREFIX.bin and PREFIX.idx
  std::optional<std::string> doc_separator;  // e.g. "%" for fortune files
};

struct PreprocessStats {
  int64_t documents = 0;
  int64_t tokens = 0;       // including one EOD per document
  int64_t bytes = 0;        // bytes of document text (separator lines excluded)
  double seconds = 0.0;
};

// Throws InputError for a missing/unreadable input, an unknown tokenizer, or no documents at all.
PreprocessStats preprocess(const PreprocessOptions& options);

}  // namespace megatrain
