#include "optim/staleness.h"

#include <utility>

namespace megatrain {

DeferredReductions::DeferredReductions(const ZeroPlan& plan) : max_(plan.options.max_staleness) {
  for (int k = 0; k < max_; ++k) spare_.emplace_back(plan.total);
}

void DeferredReductions::step_begin(FlatBuffer& grads) {
  if (grads.size() > 0) return;
  MT_CHECK(!spare_.empty(), "ZeRO: {} reductions in flight, more than max_staleness = {}", queued_.size(), max_);
  grads = std::move(spare_.back());
  spare_.pop_back();
}

void DeferredReductions::defer(FlatBuffer& grads, std::vector<Work> works) {
  MT_CHECK(defers(), "ZeRO: defer_reduction() needs max_staleness > 0");
  queued_.push_back({std::exchange(grads, FlatBuffer()), std::move(works)});
}

void DeferredReductions::retire(FlatBuffer& grads) {
  MT_CHECK(!queued_.empty(), "ZeRO: retire_reduction() with no reduction in flight");
  for (const Work& w : queued_.front().works) w.wait();
  if (grads.size() > 0) spare_.push_back(std::exchange(grads, FlatBuffer()));
  grads = std::move(queued_.front().grads);
  queued_.pop_front();
}

void DeferredReductions::discard() {
  for (Queued& q : queued_) {
    for (const Work& w : q.works) w.wait();
    spare_.push_back(std::move(q.grads));
  }
  queued_.clear();
}

}  // namespace megatrain
