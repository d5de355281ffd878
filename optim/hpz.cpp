// ZeRO++ hpZ ([Note: ZeRO++] in optim/zero_plan.h) around a stage-3 codec: the first gather of a
// unit after the parameters change runs over every dp rank through the codec, and leaves this rank
// its slice of the unit's float32 values (a secondary shard); until the next change, the unit is
// gathered from those slices within the host group of hpz_partition_size consecutive ranks.
#include <array>
#include <cstring>

#include "optim/param_store.h"

namespace megatrain {
namespace {

// Throws unless every rank of `group` runs on this rank's host.
void check_one_host(const Comm& group, int k) {
  constexpr size_t kName = 64;
  std::array<uint8_t, kName> mine{};
  const std::string host = host_name();
  std::memcpy(mine.data(), host.data(), std::min(host.size(), kName - 1));
  std::vector<uint8_t> all(kName * static_cast<size_t>(group.size()));
  group.all_gather(all.data(), mine.data(), std::vector<int64_t>(static_cast<size_t>(group.size()), kName)).wait();
  for (int r = 0; r < group.size(); ++r) {
    const std::string other(reinterpret_cast<const char*>(all.data() + kName * static_cast<size_t>(r)));
    MT_INPUT_CHECK(other == std::string(reinterpret_cast<const char*>(mine.data())),
                   "parallel.zero_hpz_partition_size = {}: a group of {} consecutive data-parallel ranks spans hosts "
                   "'{}' and '{}', but hpZ's groups must each lie on one host; use a divisor of the ranks per host",
                   k, k, host, other);
  }
}

class Hpz final : public SlotCodec {
 public:
  Hpz(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<SlotCodec> shard)
      : shard_(std::move(shard)),
        k_(plan.options.hpz_partition_size),
        group_(dp.split(dp.rank() / k_, dp.rank(), dp.name() + ".hpz")),
        units_(plan.units),
        counts_(plan.secondary_counts),
        at_(plan.secondary_at),
        secondary_(plan.secondary.count),
        valid_(plan.units.size(), false) {
    check_one_host(group_, k_);
  }
  float* held() override { return shard_->held(); }
  float* optimizer_params() override { return shard_->optimizer_params(); }
  Tensor optimizer_params16() const override { return shard_->optimizer_params16(); }
  void written() override {
    valid_.assign(valid_.size(), false);
    shard_->written();
  }
  void updated() override {
    valid_.assign(valid_.size(), false);
    shard_->updated();
  }
  void make_slot(GatherSlot& slot) const override { shard_->make_slot(slot); }
  void fetch(GatherSlot& slot, int unit) override {
    const auto u = static_cast<size_t>(unit);
    if (!valid_[u]) return shard_->fetch(slot, unit);
    slot.from_group = true;
    slot.work = group_.all_gather(slot.buffer.data(), secondary_.data() + at_[u], counts_[u]);
  }
  void unpack(GatherSlot& slot, int unit) override {
    if (slot.from_group) return;  // gathered as float32
    shard_->unpack(slot, unit);
    const auto u = static_cast<size_t>(unit);
    const FlatRange slice = flat_partition(units_[u].size(), group_.rank(), k_);
    std::copy(slot.buffer.data() + slice.begin, slot.buffer.data() + slice.end, secondary_.data() + at_[u]);
    valid_[u] = true;
  }
  const Comm* hpz_comm() const override { return &group_; }

 private:
  std::unique_ptr<SlotCodec> shard_;
  int k_;
  Comm group_;
  std::vector<FlatRange> units_;
  std::vector<std::vector<int64_t>> counts_;  // each group rank's slice of each unit
  std::vector<int64_t> at_;                   // where this rank's slice of each unit starts
  FlatBuffer secondary_;
  std::vector<bool> valid_;  // whether the unit's slice holds the current parameters
};

}  // namespace

std::unique_ptr<SlotCodec> make_hpz(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<SlotCodec> shard) {
  return std::make_unique<Hpz>(plan, dp, std::move(shard));
}

}  // namespace megatrain
