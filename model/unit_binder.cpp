#include "model/unit_binder.h"

namespace megatrain {

UnitBinder::UnitBinder(const ModelConfig& cfg, const ParamLayout& layout, StageRange range, UnitState& state,
                       UnitState* experts, Device device)
    : layout_(layout),
      range_(range),
      device_(device),
      shares_embedding_(range.head && range.embedding && cfg.tie_embeddings),
      state_(state),
      experts_(experts),
      units_(gpt_param_units(layout, range)),
      expert_units_(moe_expert_units(layout, {range})) {
  for (int l = 0; l < range_.layers; ++l) block_index_.push_back(block_param_index(layout_, range_.first_layer + l));
  for (int l = 0, k = 0; l < range_.layers; ++l) {
    const bool moe = block_index_[static_cast<size_t>(l)].router != BlockParamIndex::kAbsent;
    moe_unit_.push_back(moe ? k++ : -1);
    if (!moe) continue;
    expert_forward_order_.push_back(k - 1);
    expert_backward_order_.insert(expert_backward_order_.begin(), k - 1);
  }
  MT_CHECK(expert_forward_order_.size() == expert_units_.size(), "{} MoE blocks but {} expert units",
           expert_forward_order_.size(), expert_units_.size());
  MT_CHECK(expert_units_.empty() || experts_ != nullptr,
           "a stage with MoE blocks needs the state of their expert parameters");
  if (expert_units_.empty()) experts_ = nullptr;  // asked for nothing
  if (range_.embedding) {
    wte_index_ = layout_.index_of("embed.wte");
    if (layout_.contains("embed.wpe")) wpe_index_ = layout_.index_of("embed.wpe");
  }
  if (range_.head) {
    // A tied head reads the embedding: this stage's own, or the copy it holds (tied_copy).
    head_index_ = !cfg.tie_embeddings ? layout_.index_of("lm_head.weight")
                  : range_.embedding  ? wte_index_
                                      : layout_.index_of("embed.wte");
    final_w_index_ = layout_.index_of("final_norm.weight");
    if (layout_.contains("final_norm.bias")) final_b_index_ = layout_.index_of("final_norm.bias");
  }
  w_.blocks.resize(static_cast<size_t>(range_.layers));
  g_.blocks.resize(static_cast<size_t>(range_.layers));
  const int n = static_cast<int>(units_.size());  // [Note: unit order]
  for (int u = 0; u < n; ++u) forward_order_.push_back(u);
  if (range_.head) backward_order_.push_back(head_unit());
  if (shares_embedding_) backward_order_.push_back(embedding_unit());
  for (int l = range_.layers - 1; l >= 0; --l) backward_order_.push_back(block_unit(l));
}

void UnitBinder::begin_forward() {
  state_.begin_pass(forward_order_);
  if (experts_ != nullptr) experts_->begin_pass(expert_forward_order_);
}

void UnitBinder::begin_backward() {
  state_.begin_pass(backward_order_);
  if (experts_ != nullptr) experts_->begin_pass(expert_backward_order_);
}

int UnitBinder::expert_unit(int unit) const {
  const int l = unit - block_unit(0);
  return l >= 0 && l < range_.layers ? moe_unit_[static_cast<size_t>(l)] : -1;
}

void UnitBinder::bind(int unit, bool grads) {
  float* p = grads ? state_.unit_grads(unit) : state_.unit_params(unit);
  StageWeights& v = grads ? g_ : w_;
  const int64_t begin = units_[static_cast<size_t>(unit)].begin;
  auto view = [&](size_t i) {
    return i == BlockParamIndex::kAbsent ? Tensor{} : layout_.view_in(p, begin, i, device_);
  };
  if (range_.embedding && unit == embedding_unit()) {
    v.wte = view(wte_index_);
    v.wpe = view(wpe_index_);
    if (shares_embedding_) v.head = v.wte;
    return;
  }
  if (range_.head && unit == head_unit()) {
    v.final_norm.weight = view(final_w_index_);
    v.final_norm.bias = view(final_b_index_);
    if (!shares_embedding_) v.head = view(head_index_);
    return;
  }
  const auto l = static_cast<size_t>(unit - block_unit(0));
  v.blocks[l] = block_weights(layout_, block_index_[l], p, begin, device_);
  const int e = expert_unit(unit);
  if (e < 0) return;
  float* x = grads ? experts_->unit_grads(e) : experts_->unit_params(e);
  bind_expert_weights(v.blocks[l], layout_, block_index_[l], x, expert_units_[static_cast<size_t>(e)].begin, device_);
}

void UnitBinder::release_params(int unit) {
  state_.unit_params_done(unit);
  if (const int e = expert_unit(unit); e >= 0) experts_->unit_params_done(e);
}

void UnitBinder::release_grads(int unit) {
  state_.unit_grads_done(unit);
  if (const int e = expert_unit(unit); e >= 0) experts_->unit_grads_done(e);
}

}  // namespace megatrain
