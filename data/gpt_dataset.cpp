// GPT samples: S+1-token windows of the concatenated stream, ordered or permuted per epoch.
// Invariant: the permutation of an epoch depends only on (seed, epoch) (contract in gpt_dataset.h).
#include "data/gpt_dataset.h"

#include <limits>
#include <numeric>
#include <utility>

#include "kernels/check.h"
#include "kernels/rng.h"

namespace megatrain {

GptDataset::GptDataset(const IndexedDataset& dataset, int seq_len, bool shuffle, uint64_t seed)
    : dataset_(dataset), seq_len_(seq_len), shuffle_(shuffle), seed_(seed), per_epoch_(0) {
  MT_INPUT_CHECK(seq_len >= 1, "train.seq_len = {} must be at least 1", seq_len);
  const int64_t n = dataset.num_tokens();
  MT_INPUT_CHECK(n >= static_cast<int64_t>(seq_len) + 1,
                 "data.train = \"{}\" has {} tokens, fewer than train.seq_len + 1 = {}; use more data "
                 "or a smaller train.seq_len", dataset.prefix(), n, static_cast<int64_t>(seq_len) + 1);
  per_epoch_ = (n - 1) / seq_len;
}

void GptDataset::build_permutation(int64_t epoch) const {
  MT_CHECK(epoch >= 0 && epoch <= std::numeric_limits<uint32_t>::max(),
           "epoch {} does not fit the RNG stream (32 bits)", epoch);
  perm_.resize(static_cast<size_t>(per_epoch_));
  std::iota(perm_.begin(), perm_.end(), int64_t{0});
  const RngKey key{seed_, static_cast<uint32_t>(RngPurpose::data), static_cast<uint32_t>(epoch), 0};
  for (int64_t i = per_epoch_ - 1; i >= 1; --i) {
    auto w = rng_words(key, static_cast<uint64_t>(i));
    uint64_t r = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
    auto j = static_cast<int64_t>(r % static_cast<uint64_t>(i + 1));
    std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(j)]);
  }
  perm_epoch_ = epoch;
}

int64_t GptDataset::source_position(int64_t index) const {
  MT_CHECK(index >= 0, "sample index {} is negative", index);
  const int64_t epoch = index / per_epoch_, position = index % per_epoch_;
  if (!shuffle_) return position;
  if (perm_epoch_ != epoch) build_permutation(epoch);
  return perm_[static_cast<size_t>(position)];
}

void GptDataset::sample(int64_t index, int32_t* out) const {
  const int64_t p = source_position(index);
  dataset_.read_tokens(p * seq_len_, static_cast<int64_t>(seq_len_) + 1, out);
}

}  // namespace megatrain
