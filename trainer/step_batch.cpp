#include "trainer/step_batch.h"

#include <algorithm>

#include "kernels/check.h"
#include "kernels/ops.h"

namespace megatrain {

static_assert(kUnlearnedTarget == kMaskedTarget, "the loss leaves out the loader's unlearned targets");

StepBatch::StepBatch(const CpSplit& split, int B, int micro_batches, bool reads, const DocumentRules& rules)
    : split_(split),
      B_(B),
      micro_batches_(micro_batches),
      reads_(reads || rules.finds_starts()),
      rules_(rules),
      rows_(int64_t{B} * split.local_len()) {
  if (!reads_) return;
  tokens_.resize(static_cast<size_t>(rows_ * micro_batches));
  targets_.resize(tokens_.size());
  if (rules.finds_starts())
    starts_.resize(static_cast<size_t>(micro_batches) * static_cast<size_t>(B) * static_cast<size_t>(split.seq_len));
  if (split.cp == 1) return;  // the loader writes the rows in place
  full_inputs_.resize(static_cast<size_t>(B) * static_cast<size_t>(split.seq_len));
  full_targets_.resize(full_inputs_.size());
}

void StepBatch::load(const BatchLoader& loader, int64_t batch, bool digest) {
  batch_ = batch;
  loaded_ = loader.micro_batches(batch);
  digest_ = {};
  counted_ = 0;
  if (!reads_) return;
  MT_CHECK(loaded_ <= micro_batches_ && loader.micro_batch_size() == B_,
           "a step batch of up to {} micro-batches of {} loaded with {} of {}", micro_batches_, B_, loaded_,
           loader.micro_batch_size());
  const int64_t S = loader.seq_len();
  for (int m = 0; m < loaded_; ++m) {
    int32_t *tokens = tokens_.data() + m * rows_, *targets = targets_.data() + m * rows_;
    // Whole sequences: straight into the batch at cp = 1; else first whole, then this rank's rows.
    const bool whole = split_.cp == 1;
    int32_t *inputs = whole ? tokens : full_inputs_.data(), *outputs = whole ? targets : full_targets_.data();
    loader.load(batch, m, inputs, outputs);
    if (digest)
      for (int b = 0; b < B_; ++b)
        digest_.add(loader.sample_index(batch, m, b), inputs + b * S, S, outputs[b * S + S - 1]);
    if (!starts_.empty())
      for (int b = 0; b < B_; ++b)
        find_document_starts(inputs + b * S, static_cast<int>(S), rules_.eod, starts_.data() + (m * B_ + b) * S);
    if (!whole) {
      split_.take_local(inputs, tokens, B_);
      split_.take_local(outputs, targets, B_);
    }
    // Counted: the targets neither the loss mask (the loader's kUnlearnedTarget) nor the rules mask.
    counted_ += rules_.mask_eod ? mask_eod_targets(tokens, targets, rows_, rules_.eod, kMaskedTarget)
                                : rows_ - std::count(targets, targets + rows_, kMaskedTarget);
  }
}

}  // namespace megatrain
