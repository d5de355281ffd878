#include "optim/adamw.h"

#include <cmath>

#include "kernels/ops.h"

namespace megatrain {

AdamW::AdamW(const ParamLayout& layout, const AdamWOptions& opt, const Stream& s)
    : AdamW(layout, opt, {0, layout.total()}, layout.total(), s) {}

AdamW::AdamW(const ParamLayout& layout, const AdamWOptions& opt, FlatRange range, int64_t padded, const Stream& s)
    : layout_(layout),
      opt_(opt),
      range_(range),
      stream_(s),
      moments_(2 * Arena::aligned(static_cast<size_t>(padded) * dtype_size(dtype_of(opt.state_dtype))), s),
      m_(moments_.tensor(Shape{padded}, dtype_of(opt.state_dtype))),
      v_(moments_.tensor(Shape{padded}, dtype_of(opt.state_dtype))) {
  MT_CHECK(padded >= range.size() && range.begin >= 0 && range.end <= layout.total(), "AdamW range [{}, {}) of {}",
           range.begin, range.end, layout.total());
  MT_CHECK(opt.state_dtype == Precision::fp32 || (opt.state_dtype == Precision::bf16 && s.device == Device::cpu),
           "AdamW moments in {} on this device", precision_name(opt.state_dtype));
}

bool AdamW::decays(const ParamSpec& s) const {
  switch (s.group) {
    case ParamGroup::matrix: return true;
    case ParamGroup::embedding: return opt_.decay_embeddings;
    case ParamGroup::norm:
    case ParamGroup::bias: return opt_.decay_norms_and_biases;
    case ParamGroup::state: break;
  }
  return false;
}

void AdamW::step(float* params, const float* grads, float lr, double norm, float unscale, Tensor params16) {
  ++t_;
  AdamWStep st{};
  st.lr = lr;
  st.beta1 = opt_.beta1;
  st.beta2 = opt_.beta2;
  st.eps = opt_.eps;
  st.bias_correction1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(opt_.beta1), static_cast<double>(t_)));
  st.bias_correction2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(opt_.beta2), static_cast<double>(t_)));
  // torch.nn.utils.clip_grad_norm_: scale = max_norm / (norm + 1e-6), applied only when < 1.
  st.grad_scale = unscale;
  if (opt_.grad_clip > 0.0f && norm > opt_.grad_clip)
    st.grad_scale = static_cast<float>(opt_.grad_clip / (norm + 1e-6) * unscale);
  decayed_.clear();
  undecayed_.clear();
  const Device d = stream_.device;
  const bool copy = params16.data != nullptr, fused = copy && d == Device::cpu;
  MT_CHECK(!copy || params16.numel() == range_.size(), "AdamW: params16 has {} values for a range of {}",
           params16.numel(), range_.size());
  for (size_t i = 0; i < layout_.size(); ++i) {
    const ParamSpec& spec = layout_.spec(i);
    const int64_t off = layout_.offset(i);
    const FlatRange mine = flat_intersect(range_, FlatRange{off, off + layout_.local_shape(i).numel()});
    if (mine.size() == 0) continue;
    const Shape flat{mine.size()};
    const int64_t j = mine.begin - range_.begin;
    const Tensor param = Tensor(params + j, flat).on(d);
    const Tensor param16 = fused ? params16.part(j, flat) : Tensor{};
    if (spec.group == ParamGroup::state) {
      if (fused) convert(stream_, param16, param);
      continue;
    }
    (decays(spec) ? decayed_ : undecayed_)
        .push_back(
            {param, Tensor(const_cast<float*>(grads) + j, flat).on(d), m_.part(j, flat), v_.part(j, flat), param16});
  }
  st.weight_decay = opt_.weight_decay;
  adamw_update(stream_, decayed_, st);
  st.weight_decay = 0.0f;
  adamw_update(stream_, undecayed_, st);
  if (copy && !fused) convert(stream_, params16, Tensor(params, Shape{range_.size()}).on(d));
}

}  // namespace megatrain
