#include "trainer/step_batch.h"

#include <algorithm>

#include "kernels/check.h"

namespace megatrain {

StepBatch::StepBatch(const CpSplit& split, int B, int micro_batches, bool reads)
    : split_(split), B_(B), micro_batches_(micro_batches), reads_(reads), rows_(int64_t{B} * split.local_len()) {
  if (!reads_) return;
  tokens_.resize(static_cast<size_t>(rows_ * micro_batches));
  targets_.resize(tokens_.size());
  full_inputs_.resize(static_cast<size_t>(B) * static_cast<size_t>(split.seq_len));
  full_targets_.resize(full_inputs_.size());
}

void StepBatch::load(const BatchLoader& loader, int64_t batch, bool digest) {
  batch_ = batch;
  digest_ = {};
  if (!reads_) return;
  MT_CHECK(loader.micro_batches_per_step() == micro_batches_ && loader.micro_batch_size() == B_,
           "a step batch of {} micro-batches of {} loaded from a loader of {} of {}", micro_batches_, B_,
           loader.micro_batches_per_step(), loader.micro_batch_size());
  const int64_t S = loader.seq_len();
  for (int m = 0; m < micro_batches_; ++m) {
    loader.load(batch, m, full_inputs_.data(), full_targets_.data());
    if (digest)
      for (int b = 0; b < B_; ++b)
        digest_.add(loader.sample_index(batch, m, b), full_inputs_.data() + b * S, S,
                    full_targets_[static_cast<size_t>(b * S + S - 1)]);
    int32_t *tokens = tokens_.data() + m * rows_, *targets = targets_.data() + m * rows_;
    if (split_.cp > 1) {  // this rank's rows of the sequences
      split_.take_local(full_inputs_.data(), tokens, B_);
      split_.take_local(full_targets_.data(), targets, B_);
    } else {
      std::copy(full_inputs_.begin(), full_inputs_.end(), tokens);
      std::copy(full_targets_.begin(), full_targets_.end(), targets);
    }
  }
}

}  // namespace megatrain
