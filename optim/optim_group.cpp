#include "optim/optim_group.h"

#include <algorithm>

#include "kernels/flat_buffer.h"
#include "kernels/ops.h"

namespace megatrain {
namespace {

Tensor on(const Stream& s, float* data, int64_t n) { return Tensor(data, Shape{n}).on(s.device); }

}  // namespace

OptimGroup::OptimGroup(const OptimGroupSpec& spec, const ParamLayout& layout, const Comm& dp, const Comm* across,
                       const AdamWOptions& adamw, const Stream& stream)
    : spec_(spec),
      layout_(layout),
      stream_(stream),
      across_(across),
      zero_(spec.units, dp, spec.zero, spec.breaks, spec.order),
      adamw_(layout, adamw, zero_.optimizer_range().shifted(spec.begin), zero_.optimizer_padded(), stream),
      host_moments_(make_host_moments(adamw_, zero_.optimizer_range().size(), stream)) {
  if (spec.held) zero_.hold(*spec.held);
  if (stream.device == Device::cpu) return;
  mirror_ = Mirror{std::vector<float>(static_cast<size_t>(zero_.held_params_range().size()))};
}

// Where the parameters are float32 and all-gathered after each update (stages 1–2), a rank draws
// only its partition and the all-gather of an update gives it the rest: every element is drawn by
// its own counter-based key, so the values are those of drawing everything, at 1/dp of the work
// (8 ranks on 2 cores: 1 s of start-up).
void OptimGroup::initialise(const ModelConfig& model, uint64_t seed) {
  const FlatRange held_range = zero_.held_params_range();
  if (!mirror_ && zero_.gathers_partitions()) {
    const FlatRange part = zero_.optimizer_range();
    init_params_range(layout_, zero_.held_params() + (part.begin - held_range.begin), part.shifted(spec_.begin), model,
                      seed);
    zero_.step_end();
    return;
  }
  float* held = mirror_ ? mirror_->params.data() : zero_.held_params();
  init_params_range(layout_, held, held_range.shifted(spec_.begin), model, seed);
  params_written();
}

bool OptimGroup::has_units(int chunk) const {
  const auto k = static_cast<size_t>(chunk);
  return spec_.chunk_units[k] < spec_.chunk_units[k + 1];
}

void OptimGroup::gradients_begin(int chunk, bool last) {
  const auto k = static_cast<size_t>(chunk);
  if (has_units(chunk)) zero_.micro_batch_begin(last, spec_.chunk_units[k], spec_.chunk_units[k + 1]);
}

void OptimGroup::gradients_end(int chunk) {
  if (has_units(chunk)) zero_.micro_batch_end();
}

// A tied embedding's two copies (first and last stage) are summed over `tied` before their bucket's
// data-parallel reduction ([Note: held bucket]), so both stages reduce and update the same values at
// any ZeRO stage; then partial gradients are summed over their tensor-parallel sharers.
void OptimGroup::finish(const Comm* tied, const TpSharedParams& tp) {
  zero_.reduce_held([&](float* g) { tied->all_reduce(g, spec_.held->size()).wait(); });
  tp.reduce_partial_grads(zero_.optimizer_grads(), range());
}

bool OptimGroup::reduced_nonfinite() const { return !all_finite(stream_, zero_.optimizer_grads_tensor()); }

GradPart OptimGroup::grad_part() const {
  return GradPart(owned_grads(stream_, layout_, zero_.optimizer_grads(), range()), {zero_.partitions(), across_});
}

// Before the update, whose pass rounds the state tensors (which AdamW leaves alone) into the 16-bit
// copy with the rest; step_end then hands the updated values to every rank.
void OptimGroup::update(float lr, double norm, float unscale, const std::vector<StateStep>& state) {
  for (const StateStep& s : state) add(s);
  adamw_.step(zero_.optimizer_params(), zero_.optimizer_grads(), lr, norm, unscale, zero_.optimizer_params16());
  zero_.step_end();
}

// The step added to the part of the range this rank updates, in the memory of the stream.
void OptimGroup::add(const StateStep& step) {
  const FlatRange mine = range(), t = step.range;
  const int64_t lo = std::max(t.begin, mine.begin), hi = std::min(t.end, mine.end);
  if (lo >= hi) return;
  const Tensor held = on(stream_, zero_.optimizer_params() + (lo - mine.begin), hi - lo);
  const FlatBuffer delta(hi - lo, stream_);
  copy_from_host(stream_, delta.part(0, hi - lo), step.delta.data() + (lo - t.begin));
  add_forward(stream_, held, held, delta.part(0, hi - lo));
}

HostSlice OptimGroup::held_params_host() {
  const FlatRange held = zero_.held_params_range();
  float* params = zero_.held_params();
  if (mirror_) {
    copy_to_host(stream_, mirror_->params.data(), on(stream_, params, held.size()));
    params = mirror_->params.data();
  }
  return {params, held.shifted(spec_.begin)};
}

HostState OptimGroup::host_state() {
  const FlatRange moments = range();
  HostMoments::View v = host_moments_->view();
  return {held_params_host(),
          {v.exp_avg, moments},
          {v.exp_avg_sq, moments},
          zero_.partition().shifted(spec_.begin),
          std::move(v.keep)};
}

void OptimGroup::params_written() {
  if (mirror_) {
    const FlatRange held = zero_.held_params_range();
    copy_from_host(stream_, on(stream_, zero_.held_params(), held.size()), mirror_->params.data());
  }
  zero_.params_written();
}

void OptimGroup::state_written() {
  host_moments_->written();
  params_written();
}

}  // namespace megatrain
