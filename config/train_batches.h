// The global batch of each training step as the config sets it: train.global_batch_size, ramped
// up by train.rampup_batch_size when given (data/batch_sizes.h), and the rules every size must keep.
#pragma once
#include "config/config.h"
#include "data/batch_sizes.h"

namespace megatrain {

// InputError naming train.rampup_batch_size when the ramp cannot reach train.global_batch_size.
BatchSizes train_batch_sizes(const Config& c);

// Every size a batch takes is a multiple of train.micro_batch_size · dp and its micro-batch count
// one the pipeline schedule takes (parallel/pipeline_schedule.h); InputError naming the key
// otherwise. Needs parallel.dp and train.global_batch_size resolved.
void check_train_batches(const Config& c);

// Micro-batches per data-parallel rank of a global batch of `size` samples.
inline int micro_batches_of(const Config& c, int64_t size) {
  return static_cast<int>(size / (int64_t{c.train.micro_batch_size} * c.parallel.dp));
}

}  // namespace megatrain
