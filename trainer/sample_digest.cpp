#include "trainer/sample_digest.h"

#include "kernels/fnv1a.h"

namespace megatrain {

void SampleDigest::add(int64_t index, const int32_t* inputs, int64_t S, int32_t last_target) {
  uint64_t h = fnv1a(&index, sizeof index);
  h = fnv1a(inputs, static_cast<size_t>(S) * sizeof(int32_t), h);
  sum += fnv1a(&last_target, sizeof last_target, h);
  ++samples;
}

}  // namespace megatrain
