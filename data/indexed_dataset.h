// Megatron-LM's indexed dataset (`PREFIX.bin` + `PREFIX.idx`, Megatron-Core
// datasets/indexed_dataset.py): a memory-mapped reader and a writer that produce/consume the same
// bytes as Megatron, so datasets move freely between the two.
//
// `.idx` layout (little-endian, packed, no padding):
//   char     magic[9] = "MMIDIDX\0\0"
//   uint64   version = 1
//   uint8    dtype code (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16)
//   uint64   sequence_count
//   uint64   document_count            (= number of documents + 1)
//   int32    sequence_lengths[sequence_count]     (in tokens)
//   int64    sequence_pointers[sequence_count]    (byte offsets into .bin: cumulative len × itemsize)
//   int64    document_indices[document_count]     (0, then the sequence index after each document)
//   [int8    modes[sequence_count]]    (multimodal datasets only; accepted and ignored)
// `.bin` = the tokens of all sequences, concatenated in order.
//
// Key invariant: an IndexedDataset that opened is consistent — pointers are the running sum of the
// lengths, `.bin` holds exactly sum(lengths) tokens — so global token t is at byte t × itemsize.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace megatrain {

class LossMaskWriter;

// Megatron's dtype codes. f32/f64 exist in the format but are rejected as token streams.
enum class TokenDtype : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

int token_dtype_size(TokenDtype dtype);         // bytes per token
const char* token_dtype_name(TokenDtype dtype);  // "u16", ...
// The narrowest dtype Megatron would use for this vocabulary: u16 if vocab_size < 65536, else i32.
TokenDtype smallest_token_dtype(int64_t vocab_size);

class IndexedDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin read-only and validates both; throws DataError naming the
  // file, what is wrong and the fix.
  static IndexedDataset open(const std::string& prefix);

  const std::string& prefix() const;
  TokenDtype dtype() const;
  int64_t num_sequences() const;
  int64_t num_documents() const;  // documents, i.e. the .idx document_count − 1
  int64_t num_tokens() const;     // sum of all sequence lengths
  int64_t sequence_length(int64_t i) const;  // tokens in sequence i
  int64_t sequence_start(int64_t i) const;   // global token offset of sequence i
  // Sequences [first, last) of document d (Megatron's document_indices[d], [d + 1]).
  std::pair<int64_t, int64_t> document_sequences(int64_t d) const;

  // Copies tokens [first_token, first_token + count) of the concatenated stream into out,
  // converted to int32 (an i64 token outside int32 range throws DataError).
  void read_tokens(int64_t first_token, int64_t count, int32_t* out) const;

  // The loss-mask companion PREFIX.lossmask (data/loss_mask.h), checked against this dataset on open.
  bool has_loss_mask() const;
  // out[i] ← 1 if token first_token + i is learned, else 0; all 1 without a companion.
  void read_loss_mask(int64_t first_token, int64_t count, uint8_t* out) const;

 private:
  struct Impl;
  explicit IndexedDataset(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // shared: copies of a dataset share one mapping
};

// Writes a dataset one document (= one sequence) at a time. Output goes to PREFIX.bin.tmp and
// PREFIX.idx.tmp; finalize() renames them into place (.bin first, then .idx), so readers never see
// a half-written dataset. Destroying an unfinalized writer removes the temporary files. With
// LOSS_MASK it also writes the companion PREFIX.lossmask; without, finalize() removes a stale one.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDtype dtype, bool loss_mask = false);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document; every token must fit the dtype. The first form for a writer without a
  // loss mask, the second (LEARNED[i] nonzero: token i counts in the loss) for one with.
  void add_document(std::span<const int32_t> tokens);
  void add_document(std::span<const int32_t> tokens, std::span<const uint8_t> learned);
  void finalize();

  int64_t num_documents() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  void append(std::span<const int32_t> tokens);

  std::string prefix_;
  TokenDtype dtype_;
  std::unique_ptr<LossMaskWriter> mask_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<unsigned char> scratch_;  // one document converted to dtype
  int64_t num_tokens_ = 0;
  bool finalized_ = false;
};

}  // namespace megatrain
