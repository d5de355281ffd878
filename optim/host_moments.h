// AdamW's moments as checkpoints and memory snapshots see them: float32 values in host memory
// (optim/optim_group.h host_state). One of three parts, chosen once by where the moments are:
//   - float32 on the CPU: the moments themselves; nothing to do after a load;
//   - float32 on a device: a host copy kept beside them, refreshed by each view, sent up after a load;
//   - bf16 (optimizer.state_dtype): float32 widenings made for each view — exact — and held only as
//     long as the view is ([Note: 16-bit moments] in kernels/cpu/adamw.cpp), so the run keeps 4
//     bytes of moments per parameter, not 12. After a load wrote a view, written() rounds it back
//     to bf16 (nearest even): a float32-state checkpoint loads into bf16 moments rounded, a bf16 one
//     (stored as its exact widening) loads into either unchanged.
#pragma once
#include <cstdint>
#include <memory>

#include "optim/adamw.h"

namespace megatrain {

class HostMoments {
 public:
  struct View {
    float *exp_avg = nullptr, *exp_avg_sq = nullptr;  // the moments' first n values
    std::shared_ptr<void> keep;                       // what the pointers point into, when owned
  };
  virtual ~HostMoments() = default;
  virtual View view() = 0;
  // After a load wrote through the latest view (while it is held).
  virtual void written() = 0;
};

// For the first n moments of `adamw`, on its stream.
std::unique_ptr<HostMoments> make_host_moments(const AdamW& adamw, int64_t n, const Stream& stream);

}  // namespace megatrain
