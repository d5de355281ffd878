// AdamW over the flat parameter buffer (PyTorch semantics, see kernels/cpu/adamw.cpp), with
// global gradient-norm clipping. Weight decay applies to matrices; embeddings, norm weights and
// biases are excluded unless the options include them. Moments share the parameter layout.
#pragma once
#include <cstdint>

#include "model/params.h"

namespace megatrain {

struct AdamWOptions {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  float grad_clip = 1.0f;  // max global L2 norm; 0 = no clipping
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
};

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const AdamWOptions& opt);

  // Global L2 norm of the gradient buffer (over all parameters, padding is zero).
  double grad_norm(const float* grads) const;
  // One update at learning rate lr; clips by `norm` (as returned by grad_norm) first.
  void step(float* params, const float* grads, float lr, double norm);

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }  // when resuming from a checkpoint
  float* exp_avg() const { return m_.data(); }
  float* exp_avg_sq() const { return v_.data(); }

 private:
  bool decays(const ParamSpec& s) const;

  const ParamLayout& layout_;
  AdamWOptions opt_;
  FlatBuffer m_, v_;
  int64_t t_ = 0;
};

}  // namespace megatrain
