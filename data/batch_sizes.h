// The global batch size of each step and the samples before it: constant, or ramped up as
// Megatron-LM's `--rampup-batch-size start increment samples` (Megatron-Core's
// RampupBatchsizeNumMicroBatchesCalculator.update): while the samples consumed so far are at most
// `samples`, the batch is start + increment · ⌊consumed / (samples / n)⌋, n = (G − start) / increment
// increments of `samples / n` samples each (a float64 quotient, as Megatron computes it); past them
// it is G. Batch k starts at sample first_sample(k) = Σ_{j<k} size(j), so the consumed-sample count
// of a checkpoint names its batch (batch_starting_at).
// The ramp is held as runs of equal sizes (one per increment), so a ramp of millions of samples
// costs a few entries.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace megatrain {

struct BatchRamp {
  int64_t start = 0, increment = 0, samples = 0;
};

class BatchSizes {
 public:
  // Every batch of `global` samples.
  explicit BatchSizes(int64_t global);
  // Ramped up to `global`: InputError unless 0 < start < global, increment > 0 divides
  // global − start, samples ≥ 1 (the config names the key: config/config_validate.cpp).
  BatchSizes(int64_t global, BatchRamp ramp);

  int64_t size(int64_t batch) const;
  int64_t first_sample(int64_t batch) const;
  // The batch that starts at `samples` consumed samples; nullopt when none does.
  std::optional<int64_t> batch_starting_at(int64_t samples) const;
  int64_t global() const { return global_; }
  // Every size a batch takes, smallest first (the ramp's, then global).
  std::vector<int64_t> sizes() const;
  // The batches before the first of `global` samples (0 when constant).
  int64_t ramp_batches() const { return runs_.back().first_batch; }

 private:
  struct Run {  // batches [first_batch, next run's first_batch) of `size` samples each
    int64_t first_batch, first_sample, size;
  };
  const Run& run_of(int64_t batch) const;

  int64_t global_;
  std::vector<Run> runs_;  // the last run is the global size's, unbounded
};

}  // namespace megatrain
