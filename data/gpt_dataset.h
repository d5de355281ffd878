// GPT training samples over one IndexedDataset (or one split range of it): windows of S+1 tokens
// read through a GptSampleIndex (Megatron's doc_idx / sample_idx / shuffle_idx).
//
// Contract (exact; tests and resume depend on it): sample(i) is sample i of the index contract in
// gpt_sample_index.h. In short, with shuffle = false and the whole dataset as range: the token
// stream is every document in order (each ending with its EOD token, so windows cross document
// boundaries), per_epoch = ⌊(num_tokens − 1) / S⌋, and sample i = stream[p·S, p·S + S] with
// p = i mod per_epoch — S+1 tokens, the first S the inputs, the last S the targets. With
// shuffle = true each epoch's documents are permuted by (seed, epoch), its samples cut from that
// epoch's stream, and the epoch's samples permuted by (seed, epoch) again.
//
// Unpacked (spec.pack = false, data.pack): sample i is one document, its first min(length, S+1)
// tokens, then padding — its last token repeated, never learned (gpt_sample_index.h).
//
// Invariant: sample(i) is a pure function of (dataset, spec.docs, S, shuffle, seed, i) for
// 0 ≤ i < num_samples(); spec.num_samples only decides how many whole epochs are indexed.
// Thread-safe (no mutable state).
#pragma once
#include <cstdint>

#include "data/gpt_sample_index.h"
#include "data/indexed_dataset.h"
#include "data/sample_source.h"

namespace megatrain {

class GptDataset : public SampleSource {
 public:
  // Builds the index (DataError when the range is too small; see build_gpt_sample_index).
  // `dataset` must outlive this object.
  GptDataset(const IndexedDataset& dataset, const GptSampleSpec& spec);
  // Adopts an index built earlier for the same (dataset, spec), e.g. loaded from the cache; the
  // caller has checked it with gpt_sample_index_problem.
  GptDataset(const IndexedDataset& dataset, const GptSampleSpec& spec, GptSampleIndex index);

  int seq_len() const override { return spec_.seq_len; }
  // Every sample of the indexed epochs (≥ spec.num_samples).
  int64_t num_samples() const override { return static_cast<int64_t>(index_.shuffle_idx.size()); }
  void read_sample(int64_t i, int32_t* tokens, uint8_t* learned) const override {
    (this->*read_)(i, tokens, learned);
  }
  // Unpacked samples always may hold padding, which is never learned.
  bool has_loss_mask() const override { return dataset_.has_loss_mask() || !spec_.pack; }
  std::string describe(int64_t i, int t) const override { return (this->*describe_)(i, t); }
  // Unpacked: documents of the range longer than S + 1 tokens, of which samples hold S + 1.
  int64_t cut_documents() const { return cut_documents_; }

  int64_t num_samples_per_epoch() const { return index_.samples_per_epoch; }
  int64_t num_tokens() const { return num_tokens_; }  // tokens of the documents in the range
  const GptSampleSpec& spec() const { return spec_; }
  const GptSampleIndex& index() const { return index_; }

  // The sample number (epoch · per_epoch + position in the epoch's stream) read as sample i.
  int64_t source_sample(int64_t i) const;

 private:
  // Packed (spec.pack) and unpacked reading, chosen at construction.
  void read_packed(int64_t i, int32_t* tokens, uint8_t* learned) const;
  void read_unpacked(int64_t i, int32_t* tokens, uint8_t* learned) const;
  std::string describe_packed(int64_t i, int t) const;
  std::string describe_unpacked(int64_t i, int t) const;
  // The document order of sample i's epoch and where the sample starts (position, offset).
  const int32_t* epoch_order(int64_t i, int64_t& pos, int64_t& offset) const;

  const IndexedDataset& dataset_;
  GptSampleSpec spec_;
  GptSampleIndex index_;
  int64_t num_tokens_ = 0;
  int64_t cut_documents_ = 0;
  void (GptDataset::*read_)(int64_t, int32_t*, uint8_t*) const;
  std::string (GptDataset::*describe_)(int64_t, int) const;
};

}  // namespace megatrain
