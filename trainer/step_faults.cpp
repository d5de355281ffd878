#include "trainer/step_faults.h"

#include <cstring>
#include <limits>

#include "health/fault_inject.h"
#include "trainer/run_state.h"

namespace megatrain {
namespace {

// MEGATRAIN_FAULT bitflip: bit 22 of the first value this rank holds of the named parameter (a dense
// one, or one of this rank's experts).
void flip_a_bit(const Fault& f, RankRun& run, int64_t step) {
  MT_INPUT_CHECK(run.layout().contains(f.detail),
                 "MEGATRAIN_FAULT bitflip: tensor \"{}\" is not a parameter of rank {} (e.g. \"{}\")", f.detail,
                 run.world().rank(), run.layout().spec(0).name);
  log_injection(f, run.world().rank(), step, "tensor=" + f.detail);
  const size_t i = run.layout().index_of(f.detail);
  const FlatSlice held = run.held_params_host(run.layout().spec(i).expert ? 1 : 0);  // on a device, a host copy
  const int64_t at = run.layout().offset(i);
  if (at < held.begin || at >= held.end) return;
  uint32_t bits;
  float* x = held.data + (at - held.begin);
  std::memcpy(&bits, x, 4);
  bits ^= 1u << 22;
  std::memcpy(x, &bits, 4);  // at 16 bits the master: the next update's rounding carries it to compute
  if (run.on_device()) run.params_written();
}

class FaultyStep final : public StepCompute {
 public:
  FaultyStep(std::unique_ptr<StepCompute> inner, const StepFaults& faults, const RunState& at)
      : inner_(std::move(inner)), faults_(faults), at_(at) {}
  double loss(int64_t step, double loss_scale) override {
    const double loss = inner_->loss(step, faults_.grad_scale(loss_scale));
    return faults_.on_loss(step + 1, step + 1 + at_.data_skip, loss);
  }
  Overflow first_overflow(bool loss_nonfinite) override {
    return inner_->first_overflow(loss_nonfinite || faults_.loss_nonfinite());
  }
  void finish() override { inner_->finish(); }

 private:
  std::unique_ptr<StepCompute> inner_;
  const StepFaults& faults_;
  const RunState& at_;
};

}  // namespace

std::unique_ptr<StepCompute> StepFaults::attach(std::unique_ptr<StepCompute> compute, const RunState& at) {
  return std::make_unique<FaultyStep>(std::move(compute), *this, at);
}

void StepFaults::begin(int64_t step) {
  const int rank = run_.world().rank();
  faults_.arm_random(step, run_.world().size());
  inject_at_step_start(faults_, rank, step);
  inject_extra_collective(faults_, run_.world(), step);
  // nan: the loss, or the gradients before any reduction: all of them (a NaN loss scale) or, with
  // element=, one value (synchronous training only: a stale step computes other steps' batches).
  nan_ = cfg_.parallel.max_staleness == 0 ? faults_.find(FaultKind::nan, rank, step) : nullptr;
  if (!nan_) return;
  const bool one = !nan_->element.empty();
  log_injection(*nan_, rank, step,
                one ? fmt::format("where={} {}", nan_->detail, run_.arm_grad_nan(nan_->element)) : "where=" + nan_->detail);
}

double StepFaults::grad_scale(double scale) const {
  const bool all_grads = nan_ && nan_->detail == "grad" && nan_->element.empty();
  return all_grads ? std::numeric_limits<double>::quiet_NaN() : scale;
}

// spike strikes the data: the step that trains on global batch `batch`.
double StepFaults::on_loss(int64_t step, int64_t batch, double loss) const {
  const Fault* f = faults_.find(FaultKind::spike, run_.world().rank(), batch);
  if (!f) return loss;
  log_injection(*f, run_.world().rank(), step, fmt::format("factor={} batch={}", f->factor, batch));
  return loss * f->factor;
}

void StepFaults::updated(const StepOutcome& out) {
  if (!out.updated) return;
  if (const Fault* f = faults_.find(FaultKind::bitflip, run_.world().rank(), out.step)) flip_a_bit(*f, run_, out.step);
}

}  // namespace megatrain
