// GPT training samples over an IndexedDataset: fixed windows of S+1 tokens cut from the
// concatenated token stream, in order or in a seeded per-epoch permutation.
//
// Contract (exact; tests and resume depend on it):
//   * The token stream is all sequences of the dataset concatenated in order (each document
//     already ends with its EOD token, so windows cross document boundaries freely).
//   * S = seq_len. per_epoch = num_samples_per_epoch() = (num_tokens − 1) / S (integer division).
//     Sample p of an epoch = stream[p·S, p·S + S] inclusive: S+1 tokens, the first S are the
//     inputs, the last S (shifted by one) the targets. Consecutive samples share one token.
//   * sample(index) for any index ≥ 0: epoch = index / per_epoch, position = index % per_epoch.
//     shuffle = false: the sample at `position` is returned.
//     shuffle = true : the sample at perm_epoch[position], where perm_epoch is a permutation of
//     [0, per_epoch) that depends only on (seed, epoch): Fisher–Yates, for i = per_epoch−1 down
//     to 1: w = rng_words(RngKey{seed, RngPurpose::data, stream = epoch, offset = 0}, i),
//     r = w[0] | w[1] << 32, j = r mod (i+1), swap(perm[i], perm[j]); starting from the identity.
//
// Invariant: sample(index) is a pure function of (dataset, S, shuffle, seed, index) — the cached
// permutation is only a memo. Not thread-safe (the memo is mutable); use one object per thread.
#pragma once
#include <cstdint>
#include <vector>

#include "data/indexed_dataset.h"

namespace megatrain {

class GptDataset {
 public:
  // Throws InputError if seq_len < 1 or the dataset has fewer than seq_len + 1 tokens.
  // `dataset` must outlive this object.
  GptDataset(const IndexedDataset& dataset, int seq_len, bool shuffle, uint64_t seed);

  int seq_len() const { return seq_len_; }
  int64_t num_samples_per_epoch() const { return per_epoch_; }

  // Writes the S+1 tokens of sample `index` (see the contract above) to out.
  void sample(int64_t index, int32_t* out /* (S+1) */) const;

  // The position in the ordered stream that sample `index` reads (for tests and debugging).
  int64_t source_position(int64_t index) const;

 private:
  void build_permutation(int64_t epoch) const;

  const IndexedDataset& dataset_;
  int seq_len_;
  bool shuffle_;
  uint64_t seed_;
  int64_t per_epoch_;
  mutable int64_t perm_epoch_ = -1;     // epoch whose permutation perm_ holds
  mutable std::vector<int64_t> perm_;  // (per_epoch)
};

}  // namespace megatrain
