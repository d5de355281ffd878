// Learning-rate schedule: linear warmup, then cosine / linear / constant decay to min_lr.
// For optimizer step t = 1, 2, …  (W = warmup_steps, Dn = decay_steps):
//   t ≤ W:  lr = lr_max · t / W
//   t > W:  p = min(1, (t − W) / (Dn − W))
//           cosine:   lr = min_lr + (lr_max − min_lr) · ½ (1 + cos πp)
//           linear:   lr = lr_max − (lr_max − min_lr) · p
//           constant: lr = lr_max
#pragma once
#include <cstdint>

#include "config/config.h"

namespace megatrain {

struct LrSchedule {
  double lr_max, lr_min;
  int64_t warmup_steps, decay_steps;
  DecayKind decay;
  double at(int64_t t) const;
};

}  // namespace megatrain
