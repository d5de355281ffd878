// The one gradient norm of a training step, and where an overflow came from.
// [Note: global norm] A rank holds parts of the step's gradient: each parameter group's (optim/
// optim_group.h) values this rank owns of its optimizer range (a value several tensor-parallel
// ranks share counted on the first of them, a tied copy on its owner stage: ParamLayout::owned).
// Σ g² of a part is summed over the ranks that hold the other parts of the same group (its
// data-parallel partitions, ZeRO ≥ 1; the expert-parallel ranks, which hold other experts), the
// parts are added, and the total is summed over tensor- and pipeline-parallel ranks: every global
// parameter counted exactly once. AdamW clips by it (optim/adamw.h).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/device.h"
#include "kernels/tensor.h"
#include "model/params.h"
#include "parallel/comm.h"

namespace megatrain {

// One part of a gradient: tensors on the stream's device, and where the other parts are (nullptr
// entries are skipped).
struct GradPart {
  GradPart(std::vector<Tensor> g, std::vector<const Comm*> over = {})
      : grads(std::move(g)), sum_over(std::move(over)) {}
  // n floats at `g` on device `d`: a whole gradient, held here.
  GradPart(const float* g, int64_t n, Device d = Device::cpu)
      : grads{Tensor(const_cast<float*>(g), Shape{n}).on(d)} {}  // read only
  std::vector<Tensor> grads;
  std::vector<const Comm*> sum_over;
};

// The values of `range` this rank owns (ParamLayout::owned: shared values on the first of their
// sharers only, tied copies on their owner stage), as tensors on the stream's device; grads[j] is
// flat element range.begin + j.
std::vector<Tensor> owned_grads(const Stream& s, const ParamLayout& layout, const float* grads, FlatRange range);
// √(Σ over parts of (Σ g² summed over the part's communicators), summed over `then`).
double grad_norm(const Stream& s, const std::vector<GradPart>& parts, const std::vector<const Comm*>& then = {});

// [Note: overflow origin] Where a step's first Inf/NaN came from, the same on every rank: the
// lowest rank whose own loss or own gradients before the data-parallel reduction held one; failing
// that, the lowest rank whose reduced gradients do (an overflow in the reduction itself). Each rank
// makes a key that ranks the causes (own loss, own gradients, reduced gradients) and their ranks;
// the maximum over the ranks (one all-reduce) names the origin.
struct Overflow {
  int rank = -1;           // −1: every value finite
  const char* where = "";  // "loss", "grad" (before the reduction) or "reduced grad"
};
int64_t overflow_key(bool loss, bool grad, bool reduced_grad, int rank, int ranks);
Overflow overflow_of(int64_t max_key, int ranks);

}  // namespace megatrain
