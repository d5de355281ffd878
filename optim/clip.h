// The one gradient norm of a training step, and the one overflow check.
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
  GradPart(Tensor g) : grads{g} {}  // a whole gradient, held here
  std::vector<Tensor> grads;
  std::vector<const Comm*> sum_over;
};

// The values of `range` this rank owns (ParamLayout::owned: shared values on the first of their
// sharers only, tied copies on their owner stage), as tensors on the stream's device; grads[j] is
// flat element range.begin + j.
std::vector<Tensor> owned_grads(const Stream& s, const ParamLayout& layout, const float* grads, FlatRange range);
// √(Σ over parts of (Σ g² summed over the part's communicators), summed over `then`).
double grad_norm(const Stream& s, const std::vector<GradPart>& parts, const std::vector<const Comm*>& then = {});

}  // namespace megatrain
