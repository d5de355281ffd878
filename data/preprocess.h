// Text or JSONL files -> Megatron indexed dataset (`megatrain preprocess`).
//
// Documents, per input file in the order given:
//   - text mode (json_key unset), default: each input file is one document;
//   - text mode with doc_separator: a line exactly equal to it (without its newline) ends a
//     document; the separator line is part of no document;
//   - text mode with blank_line_docs: one or more blank lines (empty, or only spaces, tabs and a
//     final '\r') end a document; blank lines are part of no document;
//   - JSONL mode (json_key set): each non-blank line is a JSON object and its document is the
//     string at json_key;
//   - prompt-completion mode (format = prompt_completion): each non-blank line is a JSON object
//     with strings "prompt" and "completion" (not empty); its document is encode(prompt) followed
//     by encode(completion) (each encoded on its own) and EOD, and the loss-mask companion
//     PREFIX.lossmask (data/loss_mask.h) learns the completion and the EOD, not the prompt;
//   - chat mode (format = chat): each non-blank line is a JSON object {"messages": [{"role",
//     "content"}, …]}, rendered with the chat template of chat_config (a tokenizer_config.json)
//     and tokenized whole; the mask learns the assistant text only (data/chat_document.h,
//     data/chat_template.h), and the EOD after it is not learned.
// Long documents (the JSONL modes, max_tokens > 0): a document of more than max_tokens tokens, its
// EOD included, is a bad line (refused, or skipped under skip_bad_lines) — or, with truncate, cut
// to its first max_tokens − 1 tokens and its EOD (which keeps its learned flag).
// A text-mode document's text is kept exactly, including its final newline. Empty documents are
// skipped. Every document is encoded and followed by the tokenizer's EOD token, and written as one
// sequence; dtype = smallest_token_dtype(vocab_size).
//
// Pipeline: one reader thread reads documents in order (line by line, never a whole file, though
// one document must fit in memory) into batches of about batch_bytes of text; `workers` threads
// tokenize batches; the calling thread writes them in the original order. At most 2·workers
// batches are in flight, so memory is bounded regardless of corpus size, and the output is
// byte-identical for any number of workers.
//
// Bad input (invalid UTF-8 in any mode; in the JSONL modes a line that is not a JSON object, lacks
// a key or holds a non-string there, an empty completion, a conversation the template refuses or
// with nothing to learn, a document over max_tokens) throws DataError naming FILE:LINE and the
// field, unless skip_bad_lines: then the line is dropped (in text mode from its document; in JSONL
// mode the line's document), counted and listed in the stats.
//
// Invariant: the output appears only complete (IndexedDatasetWriter renames temporary files); on
// any error no output file is left behind.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megatrain {

enum class PreprocessFormat { documents, prompt_completion, chat };

struct PreprocessOptions {
  std::vector<std::string> inputs;           // text or JSONL files, read in this order
  std::string tokenizer = "bytes";           // make_tokenizer spec
  std::string output_prefix;                 // writes PREFIX.bin and PREFIX.idx (and PREFIX.lossmask)
  std::optional<std::string> doc_separator;  // e.g. "%" for fortune files
  bool blank_line_docs = false;              // blank lines end documents (text mode)
  std::optional<std::string> json_key;       // set: inputs are JSONL, document = string at key
  PreprocessFormat format = PreprocessFormat::documents;  // prompt_completion / chat: JSONL with a mask
  std::string chat_config;                   // chat: the tokenizer_config.json holding chat_template
  int64_t max_tokens = 0;                    // JSONL modes: > 0 limits a document's tokens (EOD included)
  bool truncate = false;                     // cut documents over max_tokens instead of refusing them
  int workers = 1;                           // tokenizer threads, >= 1
  bool skip_bad_lines = false;               // count and drop bad lines instead of failing
  bool progress = false;                     // progress on stderr (also when stderr is a terminal)
  int64_t batch_bytes = int64_t{4} << 20;    // text per batch (a larger document is its own batch)
};

struct PreprocessStats {
  int64_t documents = 0;
  int64_t tokens = 0;       // including one EOD per document
  int64_t bytes = 0;        // bytes of document text (separator lines excluded)
  double seconds = 0.0;
  int64_t skipped_lines = 0;              // bad lines dropped under skip_bad_lines
  std::vector<std::string> skipped_first;  // FILE:LINE of a few of them (the reader's first)
  int64_t truncated = 0;                    // documents cut to max_tokens
};

// Throws DataError for a missing/unreadable input, an unknown tokenizer, conflicting options,
// bad input (see above) or no documents at all.
PreprocessStats preprocess(const PreprocessOptions& options);

// "N documents, N tokens, N bytes, S s, R MB/s[, N cut to M tokens][, N bad lines skipped
// (FILE:LINE, ...)]".
std::string preprocess_summary(const PreprocessStats& stats);

}  // namespace megatrain
