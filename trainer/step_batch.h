// A step's micro-batches as this rank's stages read them, loaded before the pipeline schedule runs
// (docs/architecture.md, one micro-batch through a step): every micro-batch's tokens and targets —
// this rank's rows of each sequence with context parallelism (parallel/context_parallel.h) — and,
// when asked, the digest of the samples read (trainer/sample_digest.h). The schedule's callbacks
// then only index it. Ranks whose chunks neither embed nor compute the loss read nothing, unless the
// samples' documents are found (every stage's attention and positions read them). With documents
// (data/packed_documents.h): each micro-batch's document starts over its whole sequences, the
// targets after an end-of-document input masked (kMaskedTarget), and the count of targets left —
// which also leaves out the targets the data's loss mask left out (data/loss_mask.h).
#pragma once
#include <cstdint>
#include <vector>

#include "data/loader.h"
#include "data/packed_documents.h"
#include "parallel/context_parallel.h"
#include "trainer/sample_digest.h"

namespace megatrain {

class StepBatch {
 public:
  // For up to `micro_batches` micro-batches of B sequences of split.seq_len tokens (a batch ramp's
  // smaller batches use the first ones); `reads`: whether this rank reads data at all.
  StepBatch(const CpSplit& split, int B, int micro_batches, bool reads, const DocumentRules& rules = {});

  // Global batch `batch` of `loader` (whose micro-batches this was built for); with `digest`, the
  // samples' digest too.
  void load(const BatchLoader& loader, int64_t batch, bool digest);
  int64_t batch() const { return batch_; }
  int micro_batches() const { return loaded_; }  // of the loaded batch
  const int32_t* tokens(int micro) const { return reads_ ? tokens_.data() + micro * rows_ : nullptr; }
  const int32_t* targets(int micro) const { return reads_ ? targets_.data() + micro * rows_ : nullptr; }
  const SampleDigest& digest() const { return digest_; }
  // (B, seq_len) of whole sequences: each position's document's first position; null unless the
  // rules find documents.
  const int32_t* starts(int micro) const {
    return starts_.empty() ? nullptr : starts_.data() + micro * int64_t{B_} * split_.seq_len;
  }
  // The targets this rank's rows of the batch count (not masked).
  int64_t counted() const { return counted_; }
  // This rank's rows of one micro-batch: B · its rows of a sequence (CpSplit::local_len).
  int64_t rows() const { return rows_; }

 private:
  CpSplit split_;
  int B_, micro_batches_, loaded_ = 0;
  bool reads_;
  DocumentRules rules_;
  int64_t rows_;  // B · this rank's rows of a sequence
  int64_t batch_ = -1, counted_ = 0;
  std::vector<int32_t> starts_;                      // micro-batches × (B, seq_len), with documents
  std::vector<int32_t> tokens_, targets_;            // micro-batches × rows_, back to back
  std::vector<int32_t> full_inputs_, full_targets_;  // cp > 1: one micro-batch as the loader gives it
  SampleDigest digest_;
};

}  // namespace megatrain
