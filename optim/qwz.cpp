// ZeRO++ qwZ ([Note: ZeRO++] in optim/zero_plan.h): the optimizer updates float32 masters of the
// partition, and what is gathered is their int8 block quantization (optim/compress/block_quant.h);
// every rank, the owner included, computes with the dequantized values. Host memory only (ZeRO on a
// device refuses ZeRO++).
#include "optim/compress/block_quant.h"
#include "optim/param_store.h"

namespace megatrain {
namespace {

// Stages 1–2: this rank's packed partition goes in place into the concatenation of every rank's,
// which is gathered and dequantized into the full parameters compute reads.
class QuantizedParams final : public ParamStore {
 public:
  QuantizedParams(const ZeroPlan& plan, const Comm& dp)
      : dp_(dp),
        units_(plan.units),
        total_(plan.total),
        block_(plan.options.quant_block),
        part_(plan.partition),
        part_counts_(plan.part_counts),
        part_packed_(plan.part_packed),
        masters_(plan.masters.count),
        params_(plan.params.count),
        quantized_(static_cast<size_t>(plan.quantized.count)) {}
  float* held() override { return masters_.data(); }
  float* optimizer_params() override { return masters_.data(); }
  void written() override { updated(); }
  void updated() override;
  float* unit_params(int unit) override { return params_.data() + units_[static_cast<size_t>(unit)].begin; }

 private:
  Comm dp_;
  std::vector<FlatRange> units_;
  int64_t total_, block_;
  FlatRange part_;
  std::vector<int64_t> part_counts_, part_packed_;
  FlatBuffer masters_, params_;
  std::vector<uint8_t> quantized_;  // every rank's packed partition, in rank order
};

void QuantizedParams::updated() {
  const int p = dp_.size(), me = dp_.rank();
  std::vector<int64_t> at(static_cast<size_t>(p) + 1, 0);
  for (size_t k = 0; k < static_cast<size_t>(p); ++k) at[k + 1] = at[k] + part_packed_[k];
  uint8_t* all = quantized_.data();
  quant_pack(all + at[static_cast<size_t>(me)], masters_.data(), part_.size(), block_);
  dp_.all_gather(all, all + at[static_cast<size_t>(me)], part_packed_).wait();
  for (int k = 0; k < p; ++k)
    quant_unpack(params_.data() + flat_partition(total_, k, p).begin, all + at[static_cast<size_t>(k)],
                 part_counts_[static_cast<size_t>(k)], block_);
}

// Stage 3: each unit's part of the masters is packed into the quantized shard, gathered unit by
// unit; the ranks' parts of a unit are consecutive in rank order, as are their packed runs.
class QuantizedShard final : public SlotCodec {
 public:
  QuantizedShard(const ZeroPlan& plan, const Comm& dp)
      : dp_(dp),
        units_(plan.units),
        part_(plan.partition),
        block_(plan.options.quant_block),
        unit_counts_(plan.unit_counts),
        unit_packed_(plan.unit_packed),
        unit_packed_at_(plan.unit_packed_at),
        slot_packed_(plan.slot_packed.count),
        masters_(plan.masters.count),
        quantized_(static_cast<size_t>(plan.quantized.count)) {}
  float* held() override { return masters_.data(); }
  float* optimizer_params() override { return masters_.data(); }
  void written() override { updated(); }
  void updated() override {
    for (size_t u = 0; u < units_.size(); ++u) {
      const FlatRange mine = flat_intersect(units_[u], part_);
      if (mine.size() > 0)
        quant_pack(quantized_.data() + unit_packed_at_[u], masters_.data() + (mine.begin - part_.begin), mine.size(),
                   block_);
    }
  }
  void make_slot(GatherSlot& slot) const override { slot.quantized.resize(static_cast<size_t>(slot_packed_)); }
  void fetch(GatherSlot& slot, int unit) override {
    const auto u = static_cast<size_t>(unit);
    slot.work = dp_.all_gather(slot.quantized.data(), quantized_.data() + unit_packed_at_[u], unit_packed_[u]);
  }
  void unpack(GatherSlot& slot, int unit) override {
    const auto u = static_cast<size_t>(unit);
    int64_t value = 0, byte = 0;
    for (size_t k = 0; k < unit_counts_[u].size(); ++k) {
      quant_unpack(slot.buffer.data() + value, slot.quantized.data() + byte, unit_counts_[u][k], block_);
      value += unit_counts_[u][k];
      byte += unit_packed_[u][k];
    }
  }

 private:
  Comm dp_;
  std::vector<FlatRange> units_;
  FlatRange part_;
  int64_t block_;
  std::vector<std::vector<int64_t>> unit_counts_, unit_packed_;
  std::vector<int64_t> unit_packed_at_;
  int64_t slot_packed_;
  FlatBuffer masters_;
  std::vector<uint8_t> quantized_;  // this rank's packed part of each unit
};

}  // namespace

std::unique_ptr<ParamStore> make_quantized_params(const ZeroPlan& plan, const Comm& dp) {
  return std::make_unique<QuantizedParams>(plan, dp);
}
std::unique_ptr<SlotCodec> make_quantized_shard(const ZeroPlan& plan, const Comm& dp) {
  return std::make_unique<QuantizedShard>(plan, dp);
}

}  // namespace megatrain
