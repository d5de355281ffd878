// What a BatchLoader reads: a sequence of fixed-length token samples addressed by index, each
// token with its loss-mask bit (data/loss_mask.h; every token learned unless has_loss_mask()).
// Invariant: read_sample(i) is a pure function of the source's construction arguments and i, for
// 0 ≤ i < num_samples(), so any reader (any rank, a resumed run) sees the same tokens and bits.
#pragma once
#include <cstdint>
#include <string>

namespace megatrain {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int seq_len() const = 0;          // S; a sample has S + 1 tokens
  virtual int64_t num_samples() const = 0;  // samples available (what the index was built for, or more)
  // Writes the S+1 tokens of sample i to tokens and, when learned is not null, their loss-mask
  // bits (1 = learned) to learned.
  virtual void read_sample(int64_t i, int32_t* tokens /* (S+1) */, uint8_t* learned /* (S+1) or null */) const = 0;
  // Whether some token may be unlearned (a dataset of the source has a loss-mask companion).
  virtual bool has_loss_mask() const { return false; }
  void sample(int64_t i, int32_t* tokens) const { read_sample(i, tokens, nullptr); }
  // Where token `t` (0 ≤ t ≤ S) of sample i lives, for messages: "PREFIX.bin token offset N
  // (document D)"; "" when the source cannot say.
  virtual std::string describe(int64_t /*i*/, int /*t*/) const { return ""; }
};

}  // namespace megatrain
