#include "optim/zero_state.h"

#include "kernels/ops.h"

namespace megatrain {

ZeroState::ZeroState(std::vector<FlatRange> units, const Comm& dp, const ZeroOptions& opt,
                     const std::vector<int>& breaks, const UnitOrder& order)
    : plan_(plan_zero(std::move(units), dp.size(), dp.rank(), opt, breaks, order)),
      dp_(dp),
      parts_(make_zero_parts(plan_, dp_, [this](int b) { complete(b); })),
      bucket_(static_cast<size_t>(plan_.buckets.size())) {}

Tensor ZeroState::optimizer_grads_tensor() const {
  return Tensor(const_cast<float*>(optimizer_grads()), Shape{optimizer_range().size()}).on(plan_.options.stream.device);
}

void ZeroState::step_begin() {
  FlatBuffer& grads = parts_.grads->accumulator();
  parts_.stale.step_begin(grads);
  zero_fill(plan_.options.stream, grads.part(0, grads.size()));
  local_nonfinite_ = false;
}

void ZeroState::hold(FlatRange r) {
  held_ = -1;
  for (int b = 0; b < plan_.buckets.size() && held_ < 0; ++b)
    if (flat_intersect(plan_.buckets[b].range, r).size() == r.size()) held_ = b;
  MT_CHECK(held_ >= 0 && r.size() > 0, "ZeRO: no gradient bucket holds [{}, {})", r.begin, r.end);
  held_range_ = r;
}

void ZeroState::micro_batch_begin(bool last, int first_unit, int end_unit) {
  last_micro_ = last;
  // Buckets are numbered from the highest units down, so the range's are consecutive.
  const GradBuckets& buckets = plan_.buckets;
  const int last_unit = end_unit < 0 ? static_cast<int>(plan_.units.size()) - 1 : end_unit - 1;
  first_bucket_ = buckets.bucket_of(last_unit);
  end_bucket_ = buckets.bucket_of(first_unit) + 1;
  MT_CHECK(buckets[first_bucket_].last_unit == last_unit && buckets[end_bucket_ - 1].first_unit == first_unit,
           "ZeRO: units [{}, {}] do not start and end buckets", first_unit, last_unit);
  for (int b = first_bucket_; b < end_bucket_; ++b) {
    Bucket& st = bucket_[static_cast<size_t>(b)];
    st.pending = buckets[b].num_units();
    st.issued = false;
  }
}

void ZeroState::unit_grads_done(int unit) {
  const int b = plan_.buckets.bucket_of(unit);
  Bucket& st = bucket_[static_cast<size_t>(b)];
  MT_CHECK(st.pending > 0, "unit_grads_done({}) twice in one micro-batch", unit);
  if (--st.pending == 0 && plan_.options.overlap && parts_.grads->reduces(last_micro_) && b != held_) issue(b);
}

void ZeroState::micro_batch_end() {
  if (!parts_.grads->reduces(last_micro_)) return;
  for (int b = first_bucket_; b < end_bucket_; ++b) {
    const Bucket& st = bucket_[static_cast<size_t>(b)];
    MT_CHECK(st.pending == 0, "bucket {} still waits for {} units after backward", b, st.pending);
    if (!st.issued && b != held_) issue(b);
  }
  if (parts_.stale.defers()) return;  // defer_reduction() queues them
  for (int b = first_bucket_; b < end_bucket_; ++b)
    if (b != held_) complete(b);
}

// Scans the bucket for Inf/NaN before it is mixed with the other ranks', then starts its reduction.
void ZeroState::issue(int b) {
  Bucket& st = bucket_[static_cast<size_t>(b)];
  const Tensor grads = parts_.grads->bucket_grads(b);
  if (!local_nonfinite_) local_nonfinite_ = !all_finite(plan_.options.stream, grads);
  st.work = parts_.reducer->issue(b, grads, parts_.grads->reduced(b));
  parts_.grads->issued(b);
  st.issued = true;
}

void ZeroState::complete(int b) {
  Bucket& st = bucket_[static_cast<size_t>(b)];
  st.work.wait();
  st.work = Work{};
  parts_.reducer->complete(b, parts_.grads->reduced(b));
  parts_.grads->completed(b);
}

void ZeroState::defer_reduction() {
  std::vector<Work> works;
  for (Bucket& st : bucket_) {
    MT_CHECK(st.issued, "ZeRO: defer_reduction() before every bucket was issued");
    works.push_back(std::exchange(st.work, Work{}));
  }
  parts_.stale.defer(parts_.grads->accumulator(), std::move(works));
}

GradPart ZeroState::grad_part() const { return GradPart({optimizer_grads_tensor()}, {partitions()}); }

ZeroMemory ZeroState::memory() const {
  return plan_.memory(ZeroWorking{parts_.grads->pool_floats(), parts_.reducer->exchange_peak(),
                                  parts_.params->gather_slots(), parts_.reducer->state_bytes()});
}

const Comm& ZeroState::hpz_comm() const {
  const Comm* group = parts_.params->hpz_comm();
  return group ? *group : dp_;
}

}  // namespace megatrain
