// Distributed batch loader: which samples each data-parallel rank reads at each step.
//
// Contract (G_k = size of global batch k, B = micro batch, dp = data-parallel size, r = dp rank;
// data/batch_sizes.h: constant, or ramped up):
//   global batch k = samples F_k … F_k + G_k − 1 of the SampleSource (a BlendedDataset in
//   training), F_k = first_sample(k) = k·G when constant;
//   rank r takes the contiguous slice starting at F_k + r·(G_k/dp), of G_k/dp samples;
//   its micro-batch m (0 ≤ m < G_k/(B·dp)) is the next B samples of that slice:
//   row b of micro-batch m = sample F_k + r·(G_k/dp) + m·B + b.
//   inputs[b·S + t] = sample[t], targets[b·S + t] = sample[t + 1], or kUnlearnedTarget when token
//   t + 1 of the sample is not learned (its loss-mask bit is 0; data/loss_mask.h).
//
// Invariant: load() is a pure function of (step, micro, rank layout, dataset), so a resumed run
// reads exactly what an uninterrupted one would (the consumed-sample count F_k is the whole loader
// state), and the dp ranks together read each global batch
// exactly once. load() does not allocate. Not thread-safe (one scratch buffer).
#pragma once
#include <cstdint>
#include <vector>

#include "data/batch_sizes.h"
#include "data/loss_mask.h"
#include "data/sample_source.h"

namespace megatrain {

class BatchLoader {
 public:
  // Throws InputError unless every size of `sizes` is a positive multiple of micro_batch_size × dp.
  // `dataset` must outlive this object. vocab_size > 0: load() checks every token is below it.
  BatchLoader(const SampleSource& dataset, int micro_batch_size, BatchSizes sizes, int dp_rank, int dp_size,
              int64_t vocab_size = 0);
  // Every batch of global_batch_size samples.
  BatchLoader(const SampleSource& dataset, int micro_batch_size, int global_batch_size, int dp_rank, int dp_size,
              int64_t vocab_size = 0)
      : BatchLoader(dataset, micro_batch_size, BatchSizes(global_batch_size), dp_rank, dp_size, vocab_size) {}

  int micro_batches(int64_t step) const { return static_cast<int>(sizes_.size(step) / per_micro_); }  // G_k / (B·dp)
  int max_micro_batches() const { return static_cast<int>(sizes_.global() / per_micro_); }
  const BatchSizes& sizes() const { return sizes_; }
  int micro_batch_size() const { return micro_batch_size_; }
  int seq_len() const { return dataset_.seq_len(); }
  // Some targets may be kUnlearnedTarget: the loss must count the targets, not assume B·S.
  bool has_loss_mask() const { return has_loss_mask_; }

  // The global sample index of row b of micro-batch `micro` at `step` on this rank.
  int64_t sample_index(int64_t step, int micro, int row) const;

  // A token outside [0, vocab_size) throws DataError "DATA_INVALID sample=I PREFIX.bin token offset
  // N (document D): token T >= vocab_size V" (docs/robustness.md R20): a wrong tokenizer or a damaged
  // .bin must not index past the embedding.
  void load(int64_t step, int micro, int32_t* inputs /* (B, S) */, int32_t* targets /* (B, S) */) const;

 private:
  void check_tokens(int64_t i) const;  // the sample in scratch_

  const SampleSource& dataset_;
  int micro_batch_size_, dp_rank_, dp_size_;
  BatchSizes sizes_;
  int64_t per_micro_;  // B·dp
  int64_t vocab_size_;
  bool has_loss_mask_;
  mutable std::vector<int32_t> scratch_;  // (S+1)
  mutable std::vector<uint8_t> learned_;  // (S+1) when has_loss_mask_
};

}  // namespace megatrain
