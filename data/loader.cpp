// Distributed batch loader (contract in loader.h). Invariant: the dp ranks' slices of a global
// batch are disjoint and cover it; load() allocates nothing.
#include "data/loader.h"

#include <algorithm>
#include <utility>

#include "kernels/check.h"

namespace megatrain {

BatchLoader::BatchLoader(const SampleSource& dataset, int micro_batch_size, BatchSizes sizes, int dp_rank, int dp_size,
                         int64_t vocab_size)
    : dataset_(dataset),
      micro_batch_size_(micro_batch_size),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      sizes_(std::move(sizes)),
      per_micro_(int64_t{micro_batch_size} * dp_size),
      vocab_size_(vocab_size),
      has_loss_mask_(dataset.has_loss_mask()),
      scratch_(static_cast<size_t>(dataset.seq_len()) + 1),
      learned_(has_loss_mask_ ? scratch_.size() : 0) {
  MT_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size, "dp rank {} of {}", dp_rank, dp_size);
  MT_INPUT_CHECK(micro_batch_size >= 1, "train.micro_batch_size = {} must be at least 1", micro_batch_size);
  for (const int64_t g : sizes_.sizes())
    MT_INPUT_CHECK(g % per_micro_ == 0,
                   "train.global_batch_size = {} must be a positive multiple of train.micro_batch_size "
                   "× dp = {} × {} = {}; change one of them",
                   g, micro_batch_size, dp_size, per_micro_);
}

int64_t BatchLoader::sample_index(int64_t step, int micro, int row) const {
  const int micros = step >= 0 ? micro_batches(step) : 0;
  MT_CHECK(step >= 0 && micro >= 0 && micro < micros && row >= 0 && row < micro_batch_size_,
           "step {} micro {} row {} (micro-batches this step {}, micro-batch size {})", step, micro, row, micros,
           micro_batch_size_);
  const int64_t per_rank = sizes_.size(step) / dp_size_;
  return sizes_.first_sample(step) + dp_rank_ * per_rank + static_cast<int64_t>(micro) * micro_batch_size_ + row;
}

void BatchLoader::check_tokens(int64_t i) const {
  int32_t lo = 0, hi = 0;
  for (int32_t t : scratch_) lo = std::min(lo, t), hi = std::max(hi, t);
  if (lo >= 0 && hi < vocab_size_) [[likely]]
    return;
  const auto bad = std::find_if(scratch_.begin(), scratch_.end(), [&](int32_t t) { return t < 0 || t >= vocab_size_; });
  const int t = static_cast<int>(bad - scratch_.begin());
  const std::string where = dataset_.describe(i, t);
  throw DataError(fmt::format("DATA_INVALID sample={} {}: token {} is outside [0, model.vocab_size = {}); the dataset was "
                              "made with another tokenizer, or its .bin is damaged",
                              i, where.empty() ? fmt::format("token {}", t) : where, *bad, vocab_size_));
}

void BatchLoader::load(int64_t step, int micro, int32_t* inputs, int32_t* targets) const {
  const size_t s = static_cast<size_t>(dataset_.seq_len());
  for (int b = 0; b < micro_batch_size_; ++b) {
    const int64_t i = sample_index(step, micro, b);
    dataset_.read_sample(i, scratch_.data(), has_loss_mask_ ? learned_.data() : nullptr);
    if (vocab_size_ > 0) check_tokens(i);
    std::copy_n(scratch_.data(), s, inputs + b * s);
    std::copy_n(scratch_.data() + 1, s, targets + b * s);
    if (has_loss_mask_)
      for (size_t t = 0; t < s; ++t)
        if (learned_[t + 1] == 0) targets[b * s + t] = kUnlearnedTarget;
  }
}

}  // namespace megatrain
