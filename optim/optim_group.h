// OptimGroup: one parameter group of a rank's optimizer state — a flat range of the layout (the
// dense parameters, or an MoE model's expert tensors) with its data-parallel communicator, its ZeRO
// state (optim/zero_state.h: plan, stores, reducer), its AdamW and, on a device, its host mirror.
// A rank trains a list of them (trainer/rank_run.h); each step runs their protocol, in this order:
//   step_begin()                                   before the step's first backward
//   gradients_begin(chunk, last) … gradients_end(chunk)
//                                                  around each micro-batch's backward of a model chunk
//   finish(tied, tp)                               after the last micro-batch: the held bucket, the
//                                                  partial gradients of tensor-parallel sharers
//   grad_part()                                    its part of the global norm (optim/clip.h)
//   update(lr, norm, unscale, state)               the AdamW step and its publication to every rank
// [Note: a run on a device] On a device the state lives in the stream's memory; what the host reads
// or writes (checkpoints, the replica check, fault injection) goes through host_state() or
// held_params_host(), copies made by the call, and state_written() or params_written(), which
// send them back.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "model/tp_shared.h"
#include "optim/adamw.h"
#include "optim/host_moments.h"
#include "optim/clip.h"
#include "optim/zero_state.h"

namespace megatrain {

// What a group is made of, in its own flat numbering: element 0 is the layout's element `begin`.
struct OptimGroupSpec {
  bool experts = false;          // an MoE model's expert tensors ([Note: expert tensors] in model/params.h)
  int64_t begin = 0;             // the layout's flat element of the group's element 0
  int dp = 1;                    // the ranks its state is sharded over (its communicator's size)
  std::vector<FlatRange> units;  // the model's units of the group
  std::vector<int> chunk_units;  // model chunk k's units: [chunk_units[k], chunk_units[k + 1])
  std::vector<int> breaks;       // where gradient buckets break: the chunks' first units inside
  ZeroOptions zero;
  UnitOrder order;
  std::optional<FlatRange> held;  // a tied embedding's range, summed over its stages ([Note: held bucket])
};

// A rank's piece of one of the group's buffers in host memory: data[j] is the layout's flat element
// range.begin + j.
struct HostSlice {
  float* data = nullptr;
  FlatRange range;
};
// The group's state as a checkpoint holds it: parameters (the float32 ones, or their masters) and
// AdamW's moments, each covering `partition`, the part of the group this rank stores.
struct HostState {
  HostSlice params, exp_avg, exp_avg_sq;
  FlatRange partition;
  std::shared_ptr<void> keep;  // owns the moments' values when they are a widening (optim/host_moments.h)
};

// A step of a ParamSpec::state tensor by a rule of its own (the aux-free router bias): `delta` added
// to the layout's flat range `range`.
struct StateStep {
  FlatRange range;
  std::vector<float> delta;
};

class OptimGroup {
 public:
  // `layout` must outlive the group; `across`: the ranks that hold the group's other values (the
  // expert-parallel group), whose squares the global norm adds; nullptr: none.
  OptimGroup(const OptimGroupSpec& spec, const ParamLayout& layout, const Comm& dp, const Comm* across,
             const AdamWOptions& adamw, const Stream& stream);
  OptimGroup(const OptimGroup&) = delete;
  OptimGroup& operator=(const OptimGroup&) = delete;

  const OptimGroupSpec& spec() const { return spec_; }
  ZeroState& zero() { return zero_; }
  const ZeroState& zero() const { return zero_; }
  // The optimizer's range in the layout's numbering.
  FlatRange range() const { return zero_.optimizer_range().shifted(spec_.begin); }
  // The initial parameters (model/params.h init_params_range), then params_written(); at stages 1–2
  // in float32 each rank draws its partition and the others come by the update's all-gather.
  void initialise(const ModelConfig& model, uint64_t seed);
  void set_step_count(int64_t t) { adamw_.set_step_count(t); }

  void step_begin() { zero_.step_begin(); }
  void gradients_begin(int chunk, bool last);
  void gradients_end(int chunk);
  // `tied`: the stages a tied embedding spans (for the held bucket); `tp`: the tensor-parallel sharers.
  void finish(const Comm* tied, const TpSharedParams& tp);
  // Whether the reduced gradients hold an Inf or NaN (the own ones before the reduction:
  // zero().local_nonfinite()).
  bool reduced_nonfinite() const;
  GradPart grad_part() const;
  void update(float lr, double norm, float unscale, const std::vector<StateStep>& state = {});

  HostSlice held_params_host();
  HostState host_state();
  void params_written();
  void state_written();
  ZeroMemory memory() const { return zero_.memory(); }
  int64_t optimizer_bytes() const { return adamw_.state_bytes(); }

 private:
  bool has_units(int chunk) const;
  void add(const StateStep& step);
  // [Note: a run on a device]: a host copy of the held parameters (the moments': host_moments_).
  struct Mirror {
    std::vector<float> params;
  };

  OptimGroupSpec spec_;
  const ParamLayout& layout_;
  Stream stream_;
  const Comm* across_;
  ZeroState zero_;
  AdamW adamw_;
  std::unique_ptr<HostMoments> host_moments_;
  std::optional<Mirror> mirror_;  // on a device
};

}  // namespace megatrain
