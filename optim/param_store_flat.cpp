// FlatParams (optim/param_store.h): float32 parameters in one full buffer that compute reads in
// place. Replicated (stage 0: every rank updates everything), or partitioned (stages 1–2: a rank
// updates its partition, and the updated partitions are all-gathered).
#include "optim/param_store.h"

namespace megatrain {
namespace {

class FlatParams final : public ParamStore {
 public:
  FlatParams(const ZeroPlan& plan, std::optional<PartitionGather> gather)
      : units_(plan.units),
        optimizer_begin_(plan.optimizer_range.begin),
        params_(plan.params.count, plan.options.stream),
        gather_(std::move(gather)) {}
  float* held() override { return params_.data(); }
  float* optimizer_params() override { return params_.data() + optimizer_begin_; }
  void written() override {}  // every rank wrote all of them
  void updated() override {
    if (gather_) gather_->run(params_.data());
  }
  bool gathers_partitions() const override { return gather_.has_value(); }
  float* unit_params(int unit) override { return params_.data() + units_[static_cast<size_t>(unit)].begin; }

 private:
  std::vector<FlatRange> units_;
  int64_t optimizer_begin_;
  FlatBuffer params_;
  std::optional<PartitionGather> gather_;
};

}  // namespace

std::unique_ptr<ParamStore> make_flat_params(const ZeroPlan& plan, std::optional<PartitionGather> gather) {
  return std::make_unique<FlatParams>(plan, std::move(gather));
}

}  // namespace megatrain
