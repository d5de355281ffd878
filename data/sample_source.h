// What a BatchLoader reads: a sequence of fixed-length token samples addressed by index.
// Invariant: sample(i) is a pure function of the source's construction arguments and i, for
// 0 ≤ i < num_samples(), so any reader (any rank, a resumed run) sees the same tokens.
#pragma once
#include <cstdint>
#include <string>

namespace megatrain {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int seq_len() const = 0;          // S; a sample has S + 1 tokens
  virtual int64_t num_samples() const = 0;  // samples available (what the index was built for, or more)
  // Writes the S+1 tokens of sample i to out.
  virtual void sample(int64_t i, int32_t* out /* (S+1) */) const = 0;
  // Where token `t` (0 ≤ t ≤ S) of sample i lives, for messages: "PREFIX.bin token offset N
  // (document D)"; "" when the source cannot say.
  virtual std::string describe(int64_t /*i*/, int /*t*/) const { return ""; }
};

}  // namespace megatrain
