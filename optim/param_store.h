// ParamStore: where a ZeRO state keeps the parameters (optim/zero_plan.h) — what this rank holds of
// the float32 values (or their masters), what the optimizer updates, and how a unit's values reach
// the model — one of these, chosen once by make_zero_parts (optim/zero_parts.h):
//   FlatParams (param_store_flat.cpp)      float32, replicated (stage 0), or partitioned and
//                                          all-gathered after the update (1–2)
//   QuantizedParams (qwz.cpp)              qwZ at 1–2: float32 masters, and every rank computes with
//                                          the dequantized gather of their int8 blocks
//   SlotParams (param_slots.cpp)           values that reach the model through unit-sized gather
//                                          slots, made and filled by a SlotCodec:
//     HalfCopy (param_codecs.cpp)           the 16-bit copy of stages 0–2, widened unit by unit
//     FloatShard, HalfShard (param_codecs.cpp)  stage 3: the unit gathered from every rank's shard
//     QuantizedShard (qwz.cpp)              qwZ at stage 3
//     Hpz (hpz.cpp)                         hpZ's secondary shards around a stage-3 codec
// Invariant: unit_params(u)[j] is flat element units[u].begin + j of the parameters as compute
// reads them, valid until unit_params_done(u) (model/unit_state.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kernels/flat_buffer.h"
#include "optim/zero_plan.h"
#include "parallel/comm.h"

namespace megatrain {

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  // What this rank holds of the float32 parameters, plan.held_range (element 0 = its first flat
  // element): initialisation and checkpoints write here, then call written().
  virtual float* held() = 0;
  // The parameters the optimizer updates (plan.optimizer_range; at 16-bit and qwZ the masters).
  virtual float* optimizer_params() = 0;
  // 16-bit parameters: the copy of optimizer_range that the optimizer writes with its update
  // ([Note: 16-bit parameters]); empty otherwise.
  virtual Tensor optimizer_params16() const { return {}; }
  // After held() was written: derive what compute reads from it (round, quantize, gather).
  virtual void written() = 0;
  // After the optimizer's update: every rank's values become the updated ones.
  virtual void updated() = 0;
  // Whether updated() is an all-gather of the optimizer's partitions into held() (float32 at
  // stages 1–2): then what a rank writes of its partition alone, updated() gives every rank.
  virtual bool gathers_partitions() const { return false; }
  virtual void begin_pass(std::span<const int> param_order) { (void)param_order; }
  virtual float* unit_params(int unit) = 0;
  virtual void unit_params_done(int unit) { (void)unit; }
  virtual int gather_slots() const { return 0; }  // made so far
  // hpZ's group ([Note: ZeRO++]); nullptr without hpZ.
  virtual const Comm* hpz_comm() const { return nullptr; }
};

// The all-gather that gives every rank the updated partitions of the others (stages 1–2): `counts`
// are the partitions' sizes, this rank's starting at `at` of the gathered buffer.
struct PartitionGather {
  Comm dp;
  std::vector<int64_t> counts;
  int64_t at = 0;
  template <class T>
  void run(T* buffer) const {
    dp.all_gather(buffer, buffer + at, counts).wait();
  }
};

// A unit's values on their way to the model: gathered (stage 3) and/or widened from 16 bits.
struct GatherSlot {
  int unit = -1;  // −1: free
  bool acquired = false;
  bool ready = false;       // buffer holds the unit's float32 values
  bool from_group = false;  // hpZ: gathered from the group's secondary shards
  Work work;
  FlatBuffer buffer;               // the unit's float32 values (plan.slot)
  HalfBuffer packed;               // 16-bit at stage 3: the gathered bits (plan.slot16)
  std::vector<uint8_t> quantized;  // qwZ at stage 3: the gathered packed runs (plan.slot_packed)
};

// How SlotParams' values are held and brought into a slot.
class SlotCodec {
 public:
  virtual ~SlotCodec() = default;
  virtual float* held() = 0;
  virtual float* optimizer_params() = 0;
  virtual Tensor optimizer_params16() const { return {}; }
  virtual void written() = 0;
  virtual void updated() = 0;
  virtual void make_slot(GatherSlot& slot) const { (void)slot; }  // the wire buffers
  // Starts bringing `unit`'s values into the slot (slot.work: its gather, if any).
  virtual void fetch(GatherSlot& slot, int unit) = 0;
  // Once slot.work is done: the unit's float32 values into slot.buffer.
  virtual void unpack(GatherSlot& slot, int unit) = 0;
  virtual const Comm* hpz_comm() const { return nullptr; }
};

std::unique_ptr<ParamStore> make_flat_params(const ZeroPlan& plan, std::optional<PartitionGather> gather);
std::unique_ptr<ParamStore> make_quantized_params(const ZeroPlan& plan, const Comm& dp);
// prefetch: fetch the next unit of the pass while the current one computes (stage 3).
std::unique_ptr<ParamStore> make_slot_params(const ZeroPlan& plan, std::unique_ptr<SlotCodec> codec, bool prefetch);

std::unique_ptr<SlotCodec> make_half_copy(const ZeroPlan& plan, std::optional<PartitionGather> gather);
std::unique_ptr<SlotCodec> make_float_shard(const ZeroPlan& plan, const Comm& dp);
std::unique_ptr<SlotCodec> make_half_shard(const ZeroPlan& plan, const Comm& dp);
std::unique_ptr<SlotCodec> make_quantized_shard(const ZeroPlan& plan, const Comm& dp);
std::unique_ptr<SlotCodec> make_hpz(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<SlotCodec> shard);

}  // namespace megatrain
