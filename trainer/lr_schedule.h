// Learning-rate schedule: linear warmup, then cosine / linear / constant / WSD decay to min_lr.
// For optimizer step t = 1, 2, …  (W = warmup_steps, Dn = decay_steps, Wd = wsd_decay_steps):
//   t ≤ W:  lr = lr_max · t / W
//   t > W:  p = min(1, (t − W) / (Dn − W))
//           cosine:   lr = min_lr + (lr_max − min_lr) · ½ (1 + cos πp)
//           linear:   lr = lr_max − (lr_max − min_lr) · p
//           constant: lr = lr_max
//           wsd:      lr = lr_max up to t = Dn − Wd; then q = min(1, (t − (Dn − Wd)) / Wd) and
//                     lr = min_lr + (lr_max − min_lr) · c(q), c = 1 − q (linear), ½ (1 + cos πq)
//                     (cosine), 2 · 0.5^q − 1 (exponential), 1 − √q (minus_sqrt)
// — Megatron-Core's OptimizerParamScheduler.get_lr at num_steps = t (with init_lr 0), checked
// against it by tests/reference/lr_schedule_reference.py. Since Dn defaults to train.steps, a WSD
// run resumed with more train.steps stays at lr_max longer: its decay moves to the new end.
//
// The run counts samples, as Megatron's scheduler does (it steps by the samples of each update):
// lr_schedule_of gives the curve in samples — each step count X of the config becomes the samples
// the run's first X batches hold, first_sample(X) (data/batch_sizes.h) — and update t is at
// first_sample(t). With a constant batch every count is multiplied by G, the same rationals, so
// the same float64 learning rates; on a batch ramp the warmup and the decay follow the samples.
#pragma once
#include <cstdint>

#include "config/config.h"
#include "data/batch_sizes.h"

namespace megatrain {

struct LrSchedule {
  double lr_max, lr_min;
  int64_t warmup_steps, decay_steps;
  DecayKind decay;
  int64_t wsd_decay_steps = 0;
  WsdShape wsd_shape = WsdShape::linear;
  double at(int64_t t) const;
};

// [optimizer]'s schedule counted in the samples of `sizes`'s batches (resolved: decay_steps set).
LrSchedule lr_schedule_of(const OptimizerConfig& o, const BatchSizes& sizes);

}  // namespace megatrain
