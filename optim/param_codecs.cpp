// The plain SlotCodecs (optim/param_store.h): the 16-bit copy of stages 0–2 ([Note: 16-bit
// parameters]), and stage 3's shard, float32 or 16-bit, gathered unit by unit.
#include "optim/half_convert.h"
#include "optim/param_store.h"

namespace megatrain {
namespace {

// Stages 0–2 at 16 bits: float32 masters of the optimizer's range and a full 16-bit copy, of which
// the optimizer writes its range (partitioned: the partitions are then all-gathered); a unit is
// widened from the copy into its slot.
class HalfCopy final : public SlotCodec {
 public:
  HalfCopy(const ZeroPlan& plan, std::optional<PartitionGather> gather)
      : stream_(plan.options.stream),
        units_(plan.units),
        range_(plan.optimizer_range),
        masters_(plan.masters.count, stream_),
        copy_(plan.params16.count, plan.options.params, stream_),
        gather_(std::move(gather)) {}
  float* held() override { return masters_.data(); }
  float* optimizer_params() override { return masters_.data(); }
  Tensor optimizer_params16() const override { return copy_.part(range_.begin, range_.size()); }
  void written() override {
    to_half(stream_, optimizer_params16(), masters_.data());
    updated();
  }
  void updated() override {
    if (gather_) gather_->run(copy_.data());
  }
  void fetch(GatherSlot& slot, int unit) override { (void)slot, (void)unit; }  // the copy is here
  void unpack(GatherSlot& slot, int unit) override {
    const FlatRange u = units_[static_cast<size_t>(unit)];
    from_half(stream_, slot.buffer.data(), copy_.part(u.begin, u.size()));
  }

 private:
  Stream stream_;
  std::vector<FlatRange> units_;
  FlatRange range_;
  FlatBuffer masters_;
  HalfBuffer copy_;
  std::optional<PartitionGather> gather_;
};

// Stage 3: where this rank's part of each unit starts in its shard, and every rank's part's size.
struct UnitParts {
  explicit UnitParts(const ZeroPlan& plan) : counts(plan.unit_counts) {
    for (const FlatRange& u : plan.units) {
      const FlatRange mine = flat_intersect(u, plan.partition);
      at.push_back(mine.size() > 0 ? mine.begin - plan.partition.begin : 0);
    }
  }
  std::vector<std::vector<int64_t>> counts;
  std::vector<int64_t> at;
};

// Stage 3, float32: the shard is what the optimizer updates; a unit is gathered into its slot.
class FloatShard final : public SlotCodec {
 public:
  FloatShard(const ZeroPlan& plan, const Comm& dp)
      : dp_(dp), parts_(plan), shard_(plan.params.count, plan.options.stream) {}
  float* held() override { return shard_.data(); }
  float* optimizer_params() override { return shard_.data(); }
  void written() override {}
  void updated() override {}
  void fetch(GatherSlot& slot, int unit) override {
    const auto u = static_cast<size_t>(unit);
    slot.work = dp_.all_gather(slot.buffer.data(), shard_.data() + parts_.at[u], parts_.counts[u]);
  }
  void unpack(GatherSlot& slot, int unit) override { (void)slot, (void)unit; }  // gathered as float32

 private:
  Comm dp_;
  UnitParts parts_;
  FlatBuffer shard_;
};

// Stage 3 at 16 bits: float32 masters of the partition and its 16-bit copy, which is what is
// gathered (half the bytes); a unit is widened from the gathered bits.
class HalfShard final : public SlotCodec {
 public:
  HalfShard(const ZeroPlan& plan, const Comm& dp)
      : stream_(plan.options.stream),
        precision_(plan.options.params),
        dp_(dp),
        parts_(plan),
        units_(plan.units),
        range_(plan.optimizer_range),
        slot16_(plan.slot16.count),
        masters_(plan.masters.count, stream_),
        shard_(plan.params16.count, precision_, stream_) {}
  float* held() override { return masters_.data(); }
  float* optimizer_params() override { return masters_.data(); }
  Tensor optimizer_params16() const override { return shard_.part(0, range_.size()); }
  void written() override { to_half(stream_, optimizer_params16(), masters_.data()); }
  void updated() override {}  // the optimizer wrote optimizer_params16()
  void make_slot(GatherSlot& slot) const override { slot.packed = HalfBuffer(slot16_, precision_, stream_); }
  void fetch(GatherSlot& slot, int unit) override {
    const auto u = static_cast<size_t>(unit);
    slot.work = dp_.all_gather(slot.packed.data(), shard_.data() + parts_.at[u], parts_.counts[u]);
  }
  void unpack(GatherSlot& slot, int unit) override {
    from_half(stream_, slot.buffer.data(), slot.packed.part(0, units_[static_cast<size_t>(unit)].size()));
  }

 private:
  Stream stream_;
  Precision precision_;
  Comm dp_;
  UnitParts parts_;
  std::vector<FlatRange> units_;
  FlatRange range_;
  int64_t slot16_;
  FlatBuffer masters_;
  HalfBuffer shard_;
};

}  // namespace

std::unique_ptr<SlotCodec> make_half_copy(const ZeroPlan& plan, std::optional<PartitionGather> gather) {
  return std::make_unique<HalfCopy>(plan, std::move(gather));
}
std::unique_ptr<SlotCodec> make_float_shard(const ZeroPlan& plan, const Comm& dp) {
  return std::make_unique<FloatShard>(plan, dp);
}
std::unique_ptr<SlotCodec> make_half_shard(const ZeroPlan& plan, const Comm& dp) {
  return std::make_unique<HalfShard>(plan, dp);
}

}  // namespace megatrain
