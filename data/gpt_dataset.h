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
  void read_sample(int64_t i, int32_t* tokens, uint8_t* learned) const override;
  bool has_loss_mask() const override { return dataset_.has_loss_mask(); }
  std::string describe(int64_t i, int t) const override;

  int64_t num_samples_per_epoch() const { return index_.samples_per_epoch; }
  int64_t num_tokens() const { return num_tokens_; }  // tokens of the documents in the range
  const GptSampleSpec& spec() const { return spec_; }
  const GptSampleIndex& index() const { return index_; }

  // The sample number (epoch · per_epoch + position in the epoch's stream) read as sample i.
  int64_t source_sample(int64_t i) const;

 private:
  const IndexedDataset& dataset_;
  GptSampleSpec spec_;
  GptSampleIndex index_;
  int64_t num_tokens_ = 0;
};

}  // namespace megatrain
