// SlotParams (optim/param_store.h): unit values reach the model through gather slots, each sized
// for the largest unit; a slot is taken when the model asks for a unit, kept while it is acquired,
// and with prefetch the next unit of the pass is fetched into another slot meanwhile. Slots are made
// when none is free (as many as a pass keeps in use: the plan's gather_slots, from its replay).
#include "optim/param_store.h"

namespace megatrain {
namespace {

class SlotParams final : public ParamStore {
 public:
  SlotParams(const ZeroPlan& plan, std::unique_ptr<SlotCodec> codec, bool prefetch)
      : slot_floats_(plan.slot.count), stream_(plan.options.stream), codec_(std::move(codec)), prefetch_(prefetch) {}
  float* held() override { return codec_->held(); }
  float* optimizer_params() override { return codec_->optimizer_params(); }
  Tensor optimizer_params16() const override { return codec_->optimizer_params16(); }
  void written() override { codec_->written(); }
  void updated() override { codec_->updated(); }
  void begin_pass(std::span<const int> param_order) override {
    order_.assign(param_order.begin(), param_order.end());
    order_pos_ = 0;
  }
  float* unit_params(int unit) override;
  void unit_params_done(int unit) override;
  int gather_slots() const override { return static_cast<int>(slots_.size()); }
  const Comm* hpz_comm() const override { return codec_->hpz_comm(); }

 private:
  GatherSlot& fetch(int unit);  // the unit's slot, fetching into a free one if it has none

  int64_t slot_floats_;
  Stream stream_;
  std::unique_ptr<SlotCodec> codec_;
  bool prefetch_;
  std::vector<GatherSlot> slots_;
  // The current pass's order of unit_params calls and the position in it.
  std::vector<int> order_;
  size_t order_pos_ = 0;
};

GatherSlot& SlotParams::fetch(int unit) {
  for (GatherSlot& s : slots_)
    if (s.unit == unit) return s;
  GatherSlot* slot = nullptr;
  for (GatherSlot& s : slots_)
    if (s.unit < 0) {
      slot = &s;
      break;
    }
  if (!slot) {
    slot = &slots_.emplace_back();
    slot->buffer = FlatBuffer(slot_floats_, stream_);
    codec_->make_slot(*slot);
  }
  slot->unit = unit;
  slot->ready = false;
  slot->from_group = false;
  codec_->fetch(*slot, unit);
  return *slot;
}

float* SlotParams::unit_params(int unit) {
  GatherSlot* slot = &fetch(unit);
  slot->acquired = true;
  while (order_pos_ < order_.size() && order_[order_pos_] != unit) ++order_pos_;
  if (prefetch_ && order_pos_ + 1 < order_.size()) {
    const size_t index = static_cast<size_t>(slot - slots_.data());
    fetch(order_[order_pos_ + 1]);  // may grow slots_: find ours again by index
    slot = &slots_[index];
  }
  slot->work.wait();
  if (!slot->ready) {
    codec_->unpack(*slot, unit);
    slot->ready = true;
  }
  return slot->buffer.data();
}

void SlotParams::unit_params_done(int unit) {
  for (GatherSlot& s : slots_)
    if (s.unit == unit && s.acquired) {
      s.unit = -1;
      s.acquired = false;
      return;
    }
  MT_CHECK(false, "unit_params_done({}) without unit_params", unit);
}

}  // namespace

std::unique_ptr<ParamStore> make_slot_params(const ZeroPlan& plan, std::unique_ptr<SlotCodec> codec, bool prefetch) {
  return std::make_unique<SlotParams>(plan, std::move(codec), prefetch);
}

}  // namespace megatrain
