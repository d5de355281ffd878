// The deferred-reduction queue of [Note: bounded staleness] (optim/zero_plan.h): a step's bucket
// all-reduces, issued as usual, are queued with the gradient buffer they reduce in place instead of
// being waited for, and the next step accumulates into one of max_staleness spare buffers. Retiring
// waits for the oldest queued step and makes its buffer the gradients the optimizer reads.
// Invariant: the queued steps, the spares and the accumulating buffer are always s + 1 buffers.
#pragma once
#include <deque>
#include <vector>

#include "kernels/flat_buffer.h"
#include "optim/zero_plan.h"
#include "parallel/comm.h"

namespace megatrain {

class DeferredReductions {
 public:
  explicit DeferredReductions(const ZeroPlan& plan);
  bool defers() const { return max_ > 0; }
  int in_flight() const { return static_cast<int>(queued_.size()); }
  // Before a step's backward: `grads` gets a spare buffer if the last step's went into the queue.
  void step_begin(FlatBuffer& grads);
  // After the step's reductions were issued: queue them with `grads`, which is left empty.
  void defer(FlatBuffer& grads, std::vector<Work> works);
  // Waits for the oldest queued step; its buffer becomes `grads` (whose own goes back to the spares).
  void retire(FlatBuffer& grads);
  // Waits for every queued step and returns their buffers to the spares.
  void discard();

 private:
  struct Queued {
    FlatBuffer grads;
    std::vector<Work> works;
  };
  int max_;
  std::deque<Queued> queued_;  // oldest first
  std::vector<FlatBuffer> spare_;
};

}  // namespace megatrain
