// What a rank read of one global batch, for the sample log (trainer/sample_log.h): a sample's digest
// is FNV-1a over its global sample index (int64) and its tokens (the S inputs and the last target,
// int32); a batch's is the sum of its samples' digests modulo 2^64, which does not depend on which
// rank read which sample, so logs of different layouts compare equal.
#pragma once
#include <cstdint>

namespace megatrain {

struct SampleDigest {
  int64_t samples = 0;
  uint64_t sum = 0;
  // Sample `index` whose S inputs are `inputs` and whose last target is `last_target`.
  void add(int64_t index, const int32_t* inputs, int64_t S, int32_t last_target);
};

}  // namespace megatrain
