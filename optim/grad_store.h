// GradStore: where a ZeRO state's gradients are written, reduced and accumulated — one of these,
// chosen once by make_zero_parts (optim/zero_parts.h):
//   FullGrads (stage 0)       the full gradients, accumulated over the micro-batches and reduced
//                             in place on the last; the optimizer reads them whole
//   ScatteredGrads (stage 1)  as FullGrads, but each bucket's reduction lands in this rank's
//                             partition (the received shard), which the optimizer reads
//   PooledGrads (stages 2–3)  each micro-batch's gradients in bucket-sized working buffers
//                             ([Note: gradient pool]), reduced after every micro-batch and their
//                             partition accumulated into the rank's gradient shard
// Invariant: after a step's last completed reduction, optimizer_grads() holds the sum over ranks
// and micro-batches of the gradients of plan.optimizer_range.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/flat_buffer.h"
#include "optim/zero_plan.h"

namespace megatrain {

class GradStore {
 public:
  virtual ~GradStore() = default;
  // What gradients accumulate in over a step: full (stages 0–1) or the shard (2–3).
  virtual FlatBuffer& accumulator() = 0;
  // Whether a chunk's micro-batch reduces its buckets: only its last (`last`), or every one.
  virtual bool reduces(bool last) const = 0;
  virtual float* unit_grads(int unit) = 0;
  // Bucket b's gradients as backward left them, its whole range.
  virtual Tensor bucket_grads(int b) = 0;
  // Where bucket b's reduction leaves this rank's result (Reducer::issue's `out`).
  virtual float* reduced(int b) = 0;
  virtual void issued(int b) { (void)b; }
  // After bucket b's reduction completed: its result accumulated, its working buffer released.
  virtual void completed(int b) { (void)b; }
  virtual const float* optimizer_grads() const = 0;
  virtual int64_t pool_floats() const { return 0; }
};

std::unique_ptr<GradStore> make_full_grads(const ZeroPlan& plan);
std::unique_ptr<GradStore> make_scattered_grads(const ZeroPlan& plan);
// complete(b): completes bucket b's reduction (ZeroState's), to free its buffer for another.
std::unique_ptr<GradStore> make_pooled_grads(const ZeroPlan& plan, std::function<void(int)> complete);

}  // namespace megatrain
