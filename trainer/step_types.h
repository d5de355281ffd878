// The bottom of trainer/: the types a run's step loop and its observers share, with no other
// trainer header below them (docs/architecture.md §trainer).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/check.h"

namespace megatrain {

struct TrainResult {
  std::vector<double> losses;      // per step, mean over the global batch
  std::vector<double> grad_norms;  // per step, before clipping
  std::vector<double> val_losses;  // one per evaluation
  int64_t stopped_at = 0;          // the step after which a stop request ended the run; 0 = ran to the end
};

// train.max_consecutive_skips steps in a row had Inf/NaN gradients (fp32, bf16): main exits with
// kExitNonFinite.
class NonFiniteSteps : public Error {
 public:
  using Error::Error;
};

}  // namespace megatrain
