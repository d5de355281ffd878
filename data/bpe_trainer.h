// Byte-level BPE training (what `megatrain tokenizer train` runs). Input files are read line by
// line, each line split on the special tokens and pre-tokenized with the GPT-2 regex; only the
// word -> count table is held, never the corpus. Training starts from the 256 byte symbols (id =
// byte value) and repeatedly merges the most frequent adjacent pair, ties broken by the
// lexicographically smallest (left, right) byte-level spellings, until vocab_size minus the
// special tokens is reached or no pair occurs twice. Special tokens take the ids after the
// merged tokens. Invariants: the result is deterministic for given inputs and options; every
// merge's left, right and left+right are in the vocab; ids are dense from 0.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace megatrain {

struct BpeTrainOptions {
  std::vector<std::string> inputs;  // text files
  int vocab_size = 0;               // >= 257 + special_tokens.size()
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
};

struct BpeTrainResult {
  std::vector<std::string> vocab;  // id -> byte-level spelling (bytes 0..255, then merged tokens)
  std::vector<std::pair<std::string, std::string>> merges;  // rank order, byte-level spellings
  std::vector<std::string> special_tokens;                  // ids vocab.size(), vocab.size()+1, ...
  int64_t words = 0;                                        // distinct pre-tokenized words
};

// Bad options, or an input that cannot be opened or read, throw DataError naming it.
BpeTrainResult train_bpe(const BpeTrainOptions& opts);

// Writes a Hugging Face tokenizer.json (ByteLevel pre-tokenizer/decoder/post-processor, BPE
// model) atomically: `path`.tmp, then rename. A write failure throws DataError naming the path.
void write_bpe_tokenizer_json(const BpeTrainResult& result, const std::string& path);

}  // namespace megatrain
