// MEGATRAIN_FAULT nan:where=grad:element=E (health/fault_plan.h): one NaN in one element of a rank's
// dense gradients, where a layer's overflow would leave it. A UnitState between the model's chunks
// and the ZeroState they write their gradients to: armed for a step, it writes the NaN into the
// unit holding the element after the model's last write of a micro-batch and before the unit is
// handed on (unit_grads_done), so it meets ZeRO's scan of its bucket before the data-parallel
// reduction: in the accumulated gradients at stages 0–1, in the micro-batch's working buffer at
// 2–3. Invariant: every call is forwarded unchanged; armed, it writes one value once and disarms.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "model/unit_state.h"
#include "parallel/grad_buckets.h"

namespace megatrain {

class GradNanInjector final : public UnitState {
 public:
  // units and buckets: those of `inner`; s: the stream its gradients live on.
  GradNanInjector(UnitState& inner, std::vector<FlatRange> units, const GradBuckets& buckets, const Stream& s);

  // Arms the NaN for the coming step at `element`: "first" (the units' first flat element, in the
  // bucket reduced last), "middle" (the element halfway) or "last" (in bucket 0, reduced first).
  // Returns "element=E flat=F bucket=B/N" for the injection's log line.
  std::string arm(const std::string& element);

  void begin_pass(std::span<const int> param_order) override { inner_.begin_pass(param_order); }
  float* unit_params(int unit) override { return inner_.unit_params(unit); }
  void unit_params_done(int unit) override { inner_.unit_params_done(unit); }
  float* unit_grads(int unit) override { return inner_.unit_grads(unit); }
  void unit_grads_done(int unit) override;

 private:
  UnitState& inner_;
  std::vector<FlatRange> units_;
  const GradBuckets& buckets_;
  Stream stream_;
  int64_t armed_ = -1;  // the flat element to poison; −1: none
};

}  // namespace megatrain
