// The loss-mask companion of an indexed dataset, PREFIX.lossmask: one bit per token of PREFIX.bin
// saying whether the token is learned — whether predicting it from the tokens before it counts in
// the loss. `megatrain preprocess --format prompt-completion` writes it (a prompt's tokens are not
// learned, its completion's and the end-of-document token after it are); a dataset without the
// file learns every token. The loader turns an unlearned token's target into kUnlearnedTarget
// (data/loader.h), which the loss leaves out (README "Data contract").
//
// Layout (little-endian, packed):
//   char    magic[8] = "MTLMASK\0"
//   uint64  version = 1
//   uint64  token count     the dataset's: the sum of its .idx sequence lengths
//   uint64  fingerprint     FNV-1a 64 of the .idx's int32 sequence lengths, as stored there
//   uint8   bits[⌈count / 8⌉]   token t is learned iff bits[t / 8] >> (t % 8) & 1; unused bits 0
// A companion written for another dataset (another token count, or the same tokens cut into other
// documents) is refused on open, naming the file and the fix; so is a damaged one.
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>

#include "data/read_only_mapping.h"

namespace megatrain {

// The target the loader writes for a token that is not learned; kernels/ops.h's kMaskedTarget.
inline constexpr int32_t kUnlearnedTarget = -1;

class LossMask {
 public:
  // PREFIX.lossmask when it exists (nullopt otherwise, and LENGTHS is not read), checked against the
  // dataset it sits beside: NUM_TOKENS tokens whose .idx sequence lengths are the bytes LENGTHS
  // (int32 little-endian, as stored there, unaligned). DataError naming the file otherwise.
  static std::optional<LossMask> open_beside(const std::string& prefix, int64_t num_tokens,
                                             std::span<const unsigned char> lengths);

  // out[i] ← 1 if token first + i is learned, else 0, for i < count.
  void read(int64_t first, int64_t count, uint8_t* out) const;

 private:
  explicit LossMask(ReadOnlyMapping file) : file_(std::move(file)) {}
  ReadOnlyMapping file_;
};

// Writes PREFIX.lossmask.tmp as documents are added; finalize() writes the header and renames it to
// PREFIX.lossmask. Destroying an unfinalized writer removes the temporary file.
class LossMaskWriter {
 public:
  explicit LossMaskWriter(const std::string& prefix);
  ~LossMaskWriter();
  LossMaskWriter(const LossMaskWriter&) = delete;
  LossMaskWriter& operator=(const LossMaskWriter&) = delete;

  void add(std::span<const uint8_t> learned);  // one document's tokens, nonzero = learned
  // LENGTHS: every document's token count, as the .idx stores them.
  void finalize(std::span<const int32_t> lengths);

 private:
  std::string prefix_;
  std::FILE* file_ = nullptr;
  int64_t tokens_ = 0;
  uint8_t byte_ = 0;  // the bits of the byte being filled
  bool finalized_ = false;
};

}  // namespace megatrain
