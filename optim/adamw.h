// AdamW over the flat parameter buffer (PyTorch semantics, see kernels/cpu/adamw.cpp), with
// clipping by the global gradient norm (optim/clip.h). Weight decay applies to matrices;
// embeddings, norm weights and biases are excluded unless the options include them. Moments share
// the parameter layout; with ZeRO the optimizer owns one flat range of it (its shard) and updates
// only that range. It runs on a stream: its moments live in that stream's device memory, and so
// must the parameters and gradients it is given.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/params.h"

namespace megatrain {

struct AdamWOptions {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  float grad_clip = 1.0f;  // max global L2 norm; 0 = no clipping
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
  // The moments' storage: fp32, or bf16 on CPU (kernels/cpu/adamw.cpp [Note: 16-bit moments]).
  Precision state_dtype = Precision::fp32;
};

class AdamW {
 public:
  // The whole layout.
  AdamW(const ParamLayout& layout, const AdamWOptions& opt, const Stream& s = Stream::cpu());
  // Only the flat range `range` (a ZeRO shard); the moments are padded to `padded` ≥ range.size()
  // floats so every data-parallel rank holds the same amount.
  AdamW(const ParamLayout& layout, const AdamWOptions& opt, FlatRange range, int64_t padded,
        const Stream& s = Stream::cpu());

  // One update at learning rate lr over the optimizer's range; clips by `norm` (the global norm of
  // the unscaled gradient) first. params[j] and grads[j] are flat element range().begin + j.
  // `unscale` multiplies the gradients first: 1 / the loss scale they were computed at.
  // params16, when given (mixed precision: range().size() bf16 or f16 values, element j = params[j]),
  // leaves holding every parameter of the range rounded, as convert would write it: on CPU in the
  // update's own pass (kernels/cpu/adamw.cpp [Note: fused 16-bit copy]; the parameters AdamW does
  // not update, ParamGroup::state, are rounded as they are), on a device by one convert after it.
  // Alignment gaps between tensors are not written: they hold the rounding of the masters' gaps,
  // which nothing changes (optim/zero_plan.h [Note: 16-bit parameters]).
  void step(float* params, const float* grads, float lr, double norm, float unscale = 1.0f, Tensor params16 = {});

  FlatRange range() const { return range_; }
  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }  // when resuming from a checkpoint
  // In the stream's device memory, of padded elements in options().state_dtype; element j = flat
  // element range().begin + j. exp_avg() / exp_avg_sq(): the float32 moments' data (fp32 only).
  const Tensor& moment1() const { return m_; }
  const Tensor& moment2() const { return v_; }
  float* exp_avg() const { return m_.f32(); }
  float* exp_avg_sq() const { return v_.f32(); }
  int64_t state_bytes() const { return static_cast<int64_t>(m_.bytes() + v_.bytes()); }
  const AdamWOptions& options() const { return opt_; }

 private:
  bool decays(const ParamSpec& s) const;

  const ParamLayout& layout_;
  AdamWOptions opt_;
  FlatRange range_;
  Stream stream_;
  Arena moments_;
  Tensor m_, v_;
  // A step's entries, by weight decay (one multi-tensor update each); kept to reuse their memory.
  std::vector<AdamWTensors> decayed_, undecayed_;
  int64_t t_ = 0;
};

}  // namespace megatrain
