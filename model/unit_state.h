// UnitState: where a model stage finds the parameters and gradients of one *unit* (a contiguous
// range of the flat parameter layout that one step of forward or backward uses together: the
// embeddings, one block, the final norm and head) while it computes on them.
//
// The model brackets every use: unit_params(u) … unit_params_done(u) around reading u's weights,
// unit_grads(u) … unit_grads_done(u) around accumulating u's gradients (done once, after the last
// write of the micro-batch; unit_grads(u) may be asked again before that and returns the same
// memory). Both return a pointer p with p[j] = flat element units[u].begin + j. A provider is free
// to keep full replicated buffers (FullState), or to gather parameters and reduce gradients across
// data-parallel ranks just in time (optim/zero_state.h). Invariant: a pointer stays valid until the
// matching *_done call.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "parallel/flat_range.h"

namespace megatrain {

class UnitState {
 public:
  virtual ~UnitState() = default;
  // The order in which the coming pass (one forward, or one backward) will ask for unit
  // parameters, so a provider can fetch the next unit's while the current one computes.
  virtual void begin_pass(std::span<const int> param_order) { (void)param_order; }
  virtual float* unit_params(int unit) = 0;
  virtual void unit_params_done(int unit) { (void)unit; }
  virtual float* unit_grads(int unit) = 0;
  virtual void unit_grads_done(int unit) { (void)unit; }
};

// Full parameter and gradient buffers held by the caller (no data parallelism, or ZeRO 0/1 whose
// parameters and gradients are replicated).
class FullState final : public UnitState {
 public:
  FullState(std::vector<FlatRange> units, float* params, float* grads)
      : units_(std::move(units)), params_(params), grads_(grads) {}
  float* unit_params(int unit) override { return params_ + units_[static_cast<size_t>(unit)].begin; }
  float* unit_grads(int unit) override { return grads_ + units_[static_cast<size_t>(unit)].begin; }

 private:
  std::vector<FlatRange> units_;
  float* params_;
  float* grads_;
};

// Units [first, first + n) of another UnitState as units 0 … n − 1: one model chunk's view of a
// state shared by the chunks of an interleaved pipeline.
class UnitSlice final : public UnitState {
 public:
  UnitSlice(UnitState& whole, int first) : whole_(whole), first_(first) {}
  void begin_pass(std::span<const int> param_order) override {
    order_.assign(param_order.begin(), param_order.end());
    for (int& u : order_) u += first_;
    whole_.begin_pass(order_);
  }
  float* unit_params(int unit) override { return whole_.unit_params(first_ + unit); }
  void unit_params_done(int unit) override { whole_.unit_params_done(first_ + unit); }
  float* unit_grads(int unit) override { return whole_.unit_grads(first_ + unit); }
  void unit_grads_done(int unit) override { whole_.unit_grads_done(first_ + unit); }

 private:
  UnitState& whole_;
  int first_;
  std::vector<int> order_;  // the pass's order in the whole state's numbering
};

}  // namespace megatrain
