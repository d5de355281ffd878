// ZeroState: data-parallel training state with ZeRO sharding (optim/zero_plan.h), as the UnitState
// a model stage reads its parameters and writes its gradients through. It allocates from its plan
// and is made of the parts make_zero_parts chose for the stage (optim/zero_parts.h); what it adds
// is the bucket protocol: which buckets a micro-batch's backward reduces, when each is issued and
// completed, and the held bucket.
// Protocol per step: step_begin(); for each micro-batch m: micro_batch_begin(m is last), forward,
// backward, micro_batch_end(); the norm (grad_part()); the optimizer over optimizer_range();
// step_end(). Invariant: after micro_batch_end() of the last micro-batch, optimizer_grads() holds
// the sum over ranks and micro-batches of the gradients of optimizer_range(), and after step_end()
// every rank's parameters (full, or gathered per unit) are the updated ones.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "model/unit_state.h"
#include "optim/clip.h"
#include "optim/zero_parts.h"
#include "optim/zero_plan.h"

namespace megatrain {

class ZeroState final : public UnitState {
 public:
  // units: the model's units (contiguous from 0); dp: the data-parallel communicator (a handle,
  // copied); breaks: the first units of the model chunks after the first (interleaved pipelines);
  // order: the backward's unit order, for the plan's working buffers.
  ZeroState(std::vector<FlatRange> units, const Comm& dp, const ZeroOptions& opt, const std::vector<int>& breaks = {},
            const UnitOrder& order = {});
  ZeroState(const ZeroState&) = delete;
  ZeroState& operator=(const ZeroState&) = delete;

  const ZeroPlan& plan() const { return plan_; }
  // The data-parallel communicator the state is sharded and reduced over.
  const Comm& dp() const { return dp_; }
  int stage() const { return plan_.options.stage; }
  int64_t total() const { return plan_.total; }
  FlatRange partition() const { return plan_.partition; }
  int64_t shard_floats() const { return plan_.shard; }
  const GradBuckets& buckets() const { return plan_.buckets; }

  // The range the optimizer updates: [0, T) at stage 0, the partition otherwise; its moments are
  // padded to optimizer_padded() floats.
  FlatRange optimizer_range() const { return plan_.optimizer_range; }
  int64_t optimizer_padded() const { return plan_.optimizer_padded; }
  // Parameters (the masters at 16-bit) and reduced gradients of optimizer_range() (element 0 = its
  // first flat element).
  float* optimizer_params() { return parts_.params->optimizer_params(); }
  const float* optimizer_grads() const { return parts_.grads->optimizer_grads(); }
  float* optimizer_grads() { return const_cast<float*>(std::as_const(*this).optimizer_grads()); }
  // optimizer_grads() as a tensor of optimizer_range().size() floats on the state's device.
  Tensor optimizer_grads_tensor() const;
  // What this rank holds of the float32 parameters (element 0 = the range's first flat element):
  // [0, T) at stages 0–2 and the partition at stage 3; at 16-bit and qwZ, the masters
  // (optimizer_range()). After writing them (initialisation, a checkpoint), call params_written().
  FlatRange held_params_range() const { return plan_.held_range; }
  float* held_params() { return parts_.params->held(); }
  void params_written() { parts_.params->written(); }

  void step_begin();
  // Whether this rank's own gradients held an Inf or NaN before any data-parallel reduction this
  // step (each bucket is scanned as it is issued): the rank a non-finite value came from.
  bool local_nonfinite() const { return local_nonfinite_; }
  // A micro-batch's backward over units [first_unit, end_unit) (a model chunk; −1: to the last):
  // only the buckets of those units are reduced by it. `last`: the chunk's last backward of the step.
  void micro_batch_begin(bool last, int first_unit = 0, int end_unit = -1);
  void micro_batch_end();
  // [Note: held bucket] The bucket holding flat range r is not reduced during the step: its
  // gradients accumulate over the micro-batches (in its working buffer at stages 2/3) until
  // reduce_held(), called after the last micro-batch, hands them to `before` (r's gradients, in
  // place) and then reduces the bucket as usual. A tied embedding uses it to sum its two stages'
  // gradients before the data-parallel reduction, whatever the ZeRO stage.
  void hold(FlatRange r);
  template <class F>
  void reduce_held(F&& before) {
    if (held_ < 0) return;
    before(parts_.grads->bucket_grads(held_).f32() + (held_range_.begin - plan_.buckets[held_].range.begin));
    issue(held_);
    complete(held_);
  }
  // This rank's part of the step's summed gradient for the global norm (optim/clip.h): the
  // optimizer's gradients, summed over the dp ranks when each holds a partition of them.
  GradPart grad_part() const;
  // The communicator whose ranks hold the other partitions of optimizer_grads(); nullptr: whole.
  const Comm* partitions() const { return parts_.reducer->collective().partitions(); }
  // 16-bit parameters: the copy of optimizer_range() that the optimizer writes with its update
  // ([Note: 16-bit parameters]), a view on the state's device; empty otherwise (float32, qwZ).
  Tensor optimizer_params16() const { return parts_.params->optimizer_params16(); }
  // After the optimizer's update: every rank's parameters become the updated ones (at 16-bit, the
  // optimizer must have written optimizer_params16()).
  void step_end() { parts_.params->updated(); }
  // ParamStore::gathers_partitions: step_end() gives every rank what each wrote of its partition.
  bool gathers_partitions() const { return parts_.params->gathers_partitions(); }
  // [Note: bounded staleness]: after the last micro_batch_end(), queue the step's reductions in
  // flight; retire_reduction() waits for the oldest and makes it optimizer_grads();
  // discard_reductions() waits for every queued one and drops them.
  void defer_reduction();
  int reductions_in_flight() const { return parts_.stale.in_flight(); }
  void retire_reduction() { parts_.stale.retire(parts_.grads->accumulator()); }
  void discard_reductions() { parts_.stale.discard(); }

  ZeroMemory memory() const;
  // hpZ's group communicator ([Note: ZeRO++]): this rank's group of hpz_partition_size dp ranks
  // (the dp communicator itself when hpZ is off).
  const Comm& hpz_comm() const;

  void begin_pass(std::span<const int> param_order) override { parts_.params->begin_pass(param_order); }
  float* unit_params(int unit) override { return parts_.params->unit_params(unit); }
  void unit_params_done(int unit) override { parts_.params->unit_params_done(unit); }
  float* unit_grads(int unit) override { return parts_.grads->unit_grads(unit); }
  void unit_grads_done(int unit) override;

 private:
  // A bucket's reduction in the current micro-batch.
  struct Bucket {
    int pending = 0;  // units of the bucket whose gradients are not final yet
    bool issued = false;
    Work work;
  };
  void issue(int b);
  void complete(int b);

  ZeroPlan plan_;
  Comm dp_;
  ZeroParts parts_;
  std::vector<Bucket> bucket_;
  bool last_micro_ = true;
  int first_bucket_ = 0, end_bucket_ = 0;  // the buckets of the current backward's units
  int held_ = -1;                          // [Note: held bucket]
  FlatRange held_range_;
  bool local_nonfinite_ = false;
};

}  // namespace megatrain
