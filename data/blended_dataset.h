// Blending several GPT datasets by weight (Megatron-Core BlendedDataset).
//
// Contract (exact, Megatron-Core's build_blending_indices): weights w_d > 0 are normalised to sum 1.
// For global sample i = 0, 1, …, with c_d = how many of samples 0 … i−1 came from dataset d, sample
// i comes from the dataset d that maximises w_d·max(i, 1) − c_d (float64; ties to the lower d), and
// is that dataset's sample c_d. So Megatron users get the same mixture prefix. Every prefix of n
// samples holds each dataset close to its share (c_d − w_d·n in (−1.5, 1] for 2–8 datasets, tested),
// and with two datasets a global batch of G holds within one sample of w·G of the first.
//
// Invariant: the index for n samples is a prefix of the index for more; sample(i) is a pure
// function of (weights, the datasets, i). With one dataset the index is the identity and is not
// stored.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/sample_source.h"

namespace megatrain {

struct BlendIndex {
  std::vector<uint16_t> dataset;  // (n): which dataset global sample i comes from
  std::vector<int64_t> sample;    // (n): its sample index in that dataset
};

// Weights normalised to sum 1; DataError unless there are 1 … 65535 positive finite weights.
std::vector<double> normalise_blend_weights(std::span<const double> weights);

// The greedy index of the contract for `num_samples` global samples (weights already normalised).
BlendIndex build_blend_index(std::span<const double> weights, int64_t num_samples);

// "" when `index` has n entries, dataset ids below num_datasets and, per dataset, samples
// numbered 0, 1, 2, … in order; else what is wrong.
std::string blend_index_problem(const BlendIndex& index, size_t num_datasets, int64_t num_samples);

// How many samples each dataset gives in the index (the count a dataset's index must cover).
std::vector<int64_t> blend_counts(const BlendIndex& index, size_t num_datasets);

class BlendedDataset : public SampleSource {
 public:
  // One dataset: `index` must be empty (identity). Several: `index` from build_blend_index, each
  // dataset indexing at least blend_counts samples. All datasets share one seq_len.
  BlendedDataset(std::vector<std::unique_ptr<GptDataset>> datasets, BlendIndex index, int64_t num_samples);

  int seq_len() const override { return datasets_.front()->seq_len(); }
  int64_t num_samples() const override { return num_samples_; }
  void read_sample(int64_t i, int32_t* tokens, uint8_t* learned) const override;
  bool has_loss_mask() const override;  // any of the datasets has one
  std::string describe(int64_t i, int t) const override;

  struct Source {
    int dataset;
    int64_t sample;
  };
  Source source(int64_t i) const;  // which dataset and which of its samples global sample i is

  size_t num_datasets() const { return datasets_.size(); }
  const GptDataset& dataset(size_t d) const { return *datasets_[d]; }
  const BlendIndex& index() const { return index_; }

 private:
  std::vector<std::unique_ptr<GptDataset>> datasets_;
  BlendIndex index_;
  int64_t num_samples_;
};

}  // namespace megatrain
