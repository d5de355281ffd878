#include "model/stage.h"

#include <algorithm>

#include "model/embedding.h"
#include "model/linear.h"
#include "model/loss.h"

namespace megatrain {

ActivationDtype activation_dtype(Precision matmul, Device device, int cp, bool bf16_activations) {
  if (matmul != Precision::bf16) return {DType::f32, "float32 (the precision is not bf16)"};
  if (!bf16_activations) return {DType::f32, "float32 (train.bf16_activations = false)"};
  if (device != Device::cpu) return {DType::f32, "float32 (the device kernels read float32)"};
  if (cp > 1) return {DType::f32, "float32 (context parallelism's block attention is float32)"};
  return {DType::bf16, "bf16 (norm outputs, q/k/v, attention output, MLP hidden; residual stream float32)"};
}

Stage::Stage(const ModelConfig& cfg, int micro_batch_size, int seq_len, const ParamLayout& layout, StageRange range,
             const StageOptions& options, UnitState& state, TensorParallel tp, StageExperts experts,
             StageContext context)
    : cfg_(cfg), B_(micro_batch_size), T_(seq_len), range_(range), options_(options), tp_(std::move(tp)),
      local_(local_dims(cfg, TpCoord{tp_.rank(), tp_.size()})), layout_(layout),
      units_(gpt_param_units(layout_, range)), state_(state), stream_{options.device, nullptr, options.matmul},
      act_(megatrain::activation_dtype(options.matmul, options.device, context.split.cp, options.bf16_activations)
               .dtype) {
  MT_CHECK(layout.tp().rank == tp_.rank() && layout.tp().size == tp_.size(),
           "the layout is for tp rank {} of {}, the stage runs as rank {} of {}", layout.tp().rank, layout.tp().size,
           tp_.rank(), tp_.size());
  MT_CHECK(seq_len <= cfg.max_seq_len, "seq_len {} > max_seq_len {}", seq_len, cfg.max_seq_len);
  MT_CHECK(options.slots >= 1, "a stage needs at least one micro-batch slot, got {}", options.slots);
  MT_CHECK(options.recompute == Recompute::none || !options.split_backward,
           "a split backward reads in its weight step the activations its input step used; recompute would "
           "have to rebuild them twice");
  MT_CHECK(options.recompute_layers >= 0, "recompute_layers = {} < 0", options.recompute_layers);
  if (context.split.cp > 1) {
    MT_CHECK(context.split.local_len() == seq_len, "a cp rank holds {} rows of each sequence, the stage was given {}",
             context.split.local_len(), seq_len);
    MT_CHECK(context.cp || options.measure_only, "a context-parallel stage needs its cp group");
    cp_.emplace(std::move(context.cp), context.algorithm, context.split, micro_batch_size,
                AttnHeads{local_.heads, local_.kv_heads, cfg.head_dim()});
  }
  for (int l = 0; l < range_.layers; ++l) block_index_.push_back(block_param_index(layout_, range_.first_layer + l));
  expert_units_ = moe_expert_units(layout_, {range_});
  for (int l = 0, k = 0; l < range_.layers; ++l) {
    const bool moe = block_index_[static_cast<size_t>(l)].router != BlockParamIndex::kAbsent;
    moe_unit_.push_back(moe ? k++ : -1);
    if (!moe) continue;
    expert_forward_order_.push_back(k - 1);
    expert_backward_order_.insert(expert_backward_order_.begin(), k - 1);
    const std::vector<int64_t> zeros(static_cast<size_t>(cfg.moe.n_experts));
    moe_stats_.push_back({range_.first_layer + l, zeros, zeros});
  }
  MT_CHECK(expert_forward_order_.size() == expert_units_.size(), "{} MoE blocks but {} expert units",
           expert_forward_order_.size(), expert_units_.size());
  if (!expert_units_.empty() && !options.measure_only) {
    MT_CHECK(experts.state != nullptr, "a stage with MoE blocks needs the state of their expert parameters");
    experts_ = experts.state;
    dispatch_.emplace(experts.ep, cfg.moe.n_experts, cfg.d_model, stream_);
    MT_CHECK(dispatch_->ep_size() == layout.ep().size, "the layout is for ep = {}, the stage's group has {} ranks",
             layout.ep().size, dispatch_->ep_size());
  }
  if (range_.embedding) {
    wte_index_ = layout_.index_of("embed.wte");
    if (layout_.contains("embed.wpe")) wpe_index_ = layout_.index_of("embed.wpe");
  }
  if (range_.head) {
    // A tied head reads the embedding: this stage's own, or the copy it holds (tied_copy).
    head_index_ = !cfg_.tie_embeddings ? layout_.index_of("lm_head.weight")
                  : range_.embedding   ? wte_index_
                                       : layout_.index_of("embed.wte");
    final_w_index_ = layout_.index_of("final_norm.weight");
    if (layout_.contains("final_norm.bias")) final_b_index_ = layout_.index_of("final_norm.bias");
  }
  acts_.resize(static_cast<size_t>(options.slots));
  Arena measure = Arena::measuring();
  plan(measure);
  if (options.measure_only) {
    measured_bytes_ = Arena::aligned(measure.used());
    return;
  }
  arena_ = Arena(measure.used(), stream_);
  if (range_.head && stream_.device != Device::cpu)
    host_losses_.resize(static_cast<size_t>(B_) * static_cast<size_t>(T_));
  plan(arena_);
  w_.resize(static_cast<size_t>(range_.layers));
  g_.resize(static_cast<size_t>(range_.layers));
  // [Note: unit order] forward reads the units in order; the tied head reads the embedding again
  // at the end, so the embedding stays acquired through the forward pass. Backward reads the head
  // unit (and the tied embedding) first, then the blocks in reverse; the embedding's backward is a
  // scatter-add that reads no weights, so an untied embedding is not asked for in backward.
  const int n = static_cast<int>(units_.size());
  for (int u = 0; u < n; ++u) forward_order_.push_back(u);
  if (range_.head) backward_order_.push_back(head_unit());
  if (shares_embedding()) backward_order_.push_back(0);
  for (int l = range_.layers - 1; l >= 0; --l) backward_order_.push_back(block_unit(l));
}

void Stage::acquire_params(int unit) {
  bind_unit(unit, state_.unit_params(unit), {w_, wte_, wpe_, head_, final_w_});
  const int l = unit - block_unit(0);
  if (l >= 0 && l < range_.layers && expert_unit(l) >= 0) {
    const auto k = static_cast<size_t>(expert_unit(l));
    bind_expert_weights(w_[static_cast<size_t>(l)], layout_, block_index_[static_cast<size_t>(l)],
                        experts_->unit_params(expert_unit(l)), expert_units_[k].begin, stream_.device);
  }
}

void Stage::acquire_grads(int unit) {
  bind_unit(unit, state_.unit_grads(unit), {g_, dwte_, dwpe_, dhead_, final_g_});
  const int l = unit - block_unit(0);
  if (l >= 0 && l < range_.layers && expert_unit(l) >= 0) {
    const auto k = static_cast<size_t>(expert_unit(l));
    bind_expert_weights(g_[static_cast<size_t>(l)], layout_, block_index_[static_cast<size_t>(l)],
                        experts_->unit_grads(expert_unit(l)), expert_units_[k].begin, stream_.device);
  }
}

void Stage::release_params(int unit) {
  state_.unit_params_done(unit);
  const int l = unit - block_unit(0);
  if (l >= 0 && l < range_.layers && expert_unit(l) >= 0) experts_->unit_params_done(expert_unit(l));
}

void Stage::release_grads(int unit) {
  state_.unit_grads_done(unit);
  const int l = unit - block_unit(0);
  if (l >= 0 && l < range_.layers && expert_unit(l) >= 0) experts_->unit_grads_done(expert_unit(l));
}

MoeRuntime Stage::moe_runtime(const ForwardOptions& o) {
  MoeRuntime r;
  if (!dispatch_) return r;
  r.spec = router_spec(cfg_.moe);
  r.dispatch = &*dispatch_;
  r.aux_coef = cfg_.moe.aux_loss_coef;
  r.z_coef = cfg_.moe.z_loss_coef;
  r.loss_grad = o.dloss_scale * static_cast<float>(B_ * T_);  // ∂L/∂(mean token loss of the micro-batch)
  r.scratch = &moe_scratch_;
  r.cp = cp_ ? cp_->comm() : nullptr;
  r.dispatch_ms = &dispatch_ms_;
  return r;
}

void Stage::reset_moe_stats() {
  for (MoeLayerStats& m : moe_stats_) m = {m.layer, std::vector<int64_t>(m.tokens.size()), m.step_tokens};
  dispatch_ms_ = 0.0;
}

void Stage::reset_step_tokens() {
  for (MoeLayerStats& m : moe_stats_) std::fill(m.step_tokens.begin(), m.step_tokens.end(), 0);
}

void Stage::bind_unit(int unit, float* p, UnitViews v) const {
  const int64_t begin = units_[static_cast<size_t>(unit)].begin;
  const Device d = stream_.device;
  auto view = [&](size_t i) { return i == BlockParamIndex::kAbsent ? Tensor{} : layout_.view_in(p, begin, i, d); };
  if (range_.embedding && unit == 0) {
    v.wte = view(wte_index_);
    v.wpe = view(wpe_index_);
    if (shares_embedding()) v.head = v.wte;
  } else if (range_.head && unit == head_unit()) {
    v.final_norm.weight = view(final_w_index_);
    v.final_norm.bias = view(final_b_index_);
    if (!shares_embedding()) v.head = view(head_index_);
  } else {
    const auto l = static_cast<size_t>(unit - block_unit(0));
    v.blocks[l] = block_weights(layout_, block_index_[l], p, begin, d);
  }
}

void Stage::plan(Arena& arena) {
  const int64_t N = static_cast<int64_t>(B_) * T_, Nl = tp_.local_rows(), C = cfg_.d_model;
  const bool sp = tp_.sequence_parallel();
  const int ep = layout_.ep().size;  // the dispatch's group (checked above)
  const auto kinds = [&](int l) { return BlockKinds{expert_unit(l) < 0, expert_unit(l) >= 0, ep}; };
  const BlockKinds both{expert_units_.size() < static_cast<size_t>(range_.layers), !expert_units_.empty(), ep};
  if (options_.recompute == Recompute::full) {
    scratch_.recomputed = block_activations(arena, cfg_, tp_, B_, T_, nullptr, both, act_);
    scratch_.recomputed_out = arena.tensor(Shape{Nl, C});
  } else if (options_.recompute == Recompute::selective) {
    Arena shapes_only = Arena::measuring();
    const AttentionActivations like = attention_activations(shapes_only, cfg_, tp_, B_, T_);
    scratch_.recomputed.attn.att = arena.tensor(like.att.shape, act_);
    scratch_.recomputed.attn.lse = arena.tensor(like.lse.shape);
  }
  const AttentionActivations* shared_core =
      options_.recompute == Recompute::selective ? &scratch_.recomputed.attn : nullptr;
  for (Activations& a : acts_) {
    a.tokens = arena.tensor_i32(Shape{B_, T_});
    a.targets = arena.tensor_i32(Shape{B_, T_});
    a.residual.clear();
    a.blocks.clear();
    for (int l = 0; l <= range_.layers; ++l) a.residual.push_back(arena.tensor(Shape{Nl, C}));
    for (int l = 0; l < range_.layers; ++l)
      a.blocks.push_back(fully_recomputed(l)
                             ? scratch_.recomputed
                             : block_activations(arena, cfg_, tp_, B_, T_, shared_core, kinds(l), act_));
    a.deferred.clear();
    if (options_.split_backward)
      for (int l = 0; l < range_.layers; ++l)
        a.deferred.push_back(block_weight_grad_inputs(arena, cfg_, tp_, B_, T_, act_));
    if (!range_.head) continue;
    a.final_norm = norm_activations(arena, cfg_, Nl, act_);
    a.head_in = sp ? arena.tensor(Shape{N, C}, act_) : a.final_norm.out;
    a.logits = arena.tensor(Shape{N, local_.vocab});
    a.losses = arena.tensor(Shape{N});
    a.row_max = arena.tensor(Shape{N});
    a.sums = arena.tensor(Shape{2, N});
  }
  scratch_.block = block_scratch(arena, cfg_, tp_, B_, T_, act_);
  if (cp_) {
    cp_->plan(arena);
    scratch_.block.cp = &*cp_;
  }
  if (!expert_units_.empty()) moe_scratch_ = moe_scratch(arena, cfg_, tp_, ep, N);
  scratch_.dres_a = arena.tensor(Shape{Nl, C});
  scratch_.dres_b = arena.tensor(Shape{Nl, C});
}

DropoutSite Stage::dropout_site(const ForwardOptions& o, int layer) const {
  DropoutSite d;
  if (!o.dropout || cfg_.dropout <= 0.0f) return d;
  d.p = cfg_.dropout;
  d.seed = o.dropout_seed;
  d.stream_base = static_cast<uint32_t>(2 * (layer + 1));  // stream 0 is the embedding's; layer: global index
  // With context parallelism each cp rank keys its rows as if they followed the others' in the
  // sample: masks distinct on every rank, not the single process's (whose rows are in another order).
  const uint64_t T = cp_ ? static_cast<uint64_t>(cp_->split().seq_len) : static_cast<uint64_t>(T_);
  const uint64_t cp_rows = cp_ ? static_cast<uint64_t>(cp_->split().rank) * static_cast<uint64_t>(T_) : 0;
  d.offset = (o.first_sample * T + cp_rows + static_cast<uint64_t>(tp_.first_row())) *
             static_cast<uint64_t>(cfg_.d_model);
  return d;
}

void Stage::recompute(int l, Activations& a) {
  const auto li = static_cast<size_t>(l);
  if (fully_recomputed(l)) {
    const MoeRuntime moe = moe_runtime(a.options);
    block_forward(stream_, cfg_, tp_, scratch_.recomputed_out, a.blocks[li], scratch_.block, a.residual[li], w_[li],
                  dropout_site(a.options, range_.first_layer + l), &moe);
  } else if (options_.recompute == Recompute::selective) {
    attention_core_forward(stream_, cfg_, tp_, a.blocks[li].attn, scratch_.block);
  }
}

Tensor Stage::logits(int slot) const {
  const Activations& a = acts_[static_cast<size_t>(slot)];
  MT_CHECK(range_.head && a.options.grad == LossGrad::none,
           "logits() needs the last stage and a preceding forward() with LossGrad::none");
  return a.logits;
}

float Stage::forward(int slot, const MicroBatch& mb, Tensor input) {
  const Stream& s = stream_;
  Activations& a = acts_[static_cast<size_t>(slot)];
  const int64_t N = static_cast<int64_t>(B_) * T_;
  a.options = mb.options;
  BlockScratch& sc = scratch_.block;
  state_.begin_pass(forward_order_);
  if (experts_ != nullptr) experts_->begin_pass(expert_forward_order_);
  const MoeRuntime moe = moe_runtime(a.options);
  if (range_.embedding) {
    for (int64_t i = 0; i < N; ++i)
      MT_CHECK(mb.tokens[i] >= 0 && mb.tokens[i] < cfg_.vocab_size,
               "token id {} out of range [0, {}) at position {}: the dataset's tokenizer does not match "
               "model.vocab_size", mb.tokens[i], cfg_.vocab_size, i);
    copy_from_host(s, a.tokens, mb.tokens);
    acquire_params(0);
    embedding_layer_forward(s, tp_, local_, a.residual[0], sc.partial, a.tokens, {wte_, wpe_}, T_,
                            dropout_site(a.options, -1), cp_ ? &cp_->split() : nullptr);
    if (!shares_embedding()) release_params(0);
  } else {
    MT_CHECK(input.numel() == a.residual[0].numel(), "stage input of {} floats, expected {}", input.numel(),
             a.residual[0].numel());
    copy(s, a.residual[0], input);
  }
  for (int l = 0; l < range_.layers; ++l) {
    const auto li = static_cast<size_t>(l);
    acquire_params(block_unit(l));
    block_forward(s, cfg_, tp_, a.residual[li + 1], a.blocks[li], sc, a.residual[li], w_[li],
                  dropout_site(a.options, range_.first_layer + l), &moe);
    release_params(block_unit(l));
    if (expert_unit(l) >= 0 && a.options.grad != LossGrad::none) {
      MoeLayerStats& m = moe_stats_[static_cast<size_t>(expert_unit(l))];
      const MoeForwardStats& f = a.blocks[li].moe.stats;
      for (size_t e = 0; e < m.tokens.size(); ++e) {
        m.tokens[e] += f.tokens[e];
        m.step_tokens[e] += f.tokens[e];
      }
      m.dropped += f.router.dropped;
      m.assignments += N * cfg_.moe.top_k;
      m.aux += f.router.aux;
      m.z += f.router.z;
      ++m.micro_batches;
    }
  }
  if (!range_.head) return 0.0f;
  for (int64_t i = 0; i < N; ++i)
    MT_CHECK(mb.targets[i] >= 0 && mb.targets[i] < cfg_.vocab_size,
             "target id {} out of range [0, {}) at position {}: the dataset's tokenizer does not match "
             "model.vocab_size", mb.targets[i], cfg_.vocab_size, i);
  copy_from_host(s, a.targets, mb.targets);
  acquire_params(head_unit());
  norm_forward(s, cfg_, a.final_norm, a.residual.back(), final_w_);
  tp_.enter_forward(a.head_in, a.final_norm.out);
  column_parallel_forward(s, a.logits, a.head_in, head_, Tensor{});
  release_params(head_unit());
  if (shares_embedding()) release_params(0);
  vocab_parallel_cross_entropy(s, tp_, local_, a.losses, a.logits, a.row_max, a.sums, a.targets, a.options.grad,
                               a.options.dloss_scale);
  const float* losses = a.losses.f32();
  if (s.device != Device::cpu) {  // read back from the device; on CPU the losses are host memory already
    copy_to_host(s, host_losses_.data(), a.losses);
    losses = host_losses_.data();
  }
  double sum = 0.0;
  for (int64_t i = 0; i < N; ++i) sum += losses[i];
  return static_cast<float>(sum / static_cast<double>(N));
}

Tensor Stage::backward_pass(int slot, Tensor dout, bool defer) {
  Activations& a = acts_[static_cast<size_t>(slot)];
  MT_CHECK(a.options.grad == LossGrad::in_place, "backward() needs a forward() with LossGrad::in_place");
  MT_CHECK(!defer || options_.split_backward, "backward_input() needs a stage built with split_backward");
  // A split backward hands the gradients back in backward_weights(), after their last write.
  const auto grads_done = [&](int unit) {
    if (!defer) release_grads(unit);
  };
  const Stream& s = stream_;
  Tensor dres = scratch_.dres_a, dnext = scratch_.dres_b;
  const bool tied = shares_embedding();
  BlockScratch& sc = scratch_.block;
  const bool sp = tp_.sequence_parallel();
  state_.begin_pass(backward_order_);
  if (experts_ != nullptr) experts_->begin_pass(expert_backward_order_);
  const MoeRuntime moe = moe_runtime(a.options);
  if (range_.head) {
    acquire_params(head_unit());
    acquire_grads(head_unit());
    if (tied) {
      acquire_params(0);
      acquire_grads(0);
    }
    // [Note: tied head] a head tied to this stage's embedding keeps its weight gradient in B, so the
    // two contributions to the one gradient add in the same order as without the split.
    column_parallel_backward(s, tp_, sc.dnorm, sp ? sc.dfull : sc.dnorm, defer && !tied ? Tensor{} : dhead_,
                             Tensor{}, a.logits, a.head_in, head_);
    norm_backward(s, cfg_, dres, final_g_, sc.dnorm, Tensor{}, a.final_norm, a.residual.back(), final_w_);
    release_params(head_unit());
    if (tied) release_params(0);
    grads_done(head_unit());
  } else {
    MT_CHECK(dout.numel() == dres.numel(), "stage output gradient of {} floats, expected {}", dout.numel(),
             dres.numel());
    copy(s, dres, dout);
  }
  for (int l = range_.layers - 1; l >= 0; --l) {
    const auto li = static_cast<size_t>(l);
    acquire_params(block_unit(l));
    recompute(l, a);
    acquire_grads(block_unit(l));
    block_backward(s, cfg_, tp_, dnext, g_[li], dres, a.blocks[li], sc, a.residual[li], w_[li],
                   dropout_site(a.options, range_.first_layer + l), defer ? a.deferred[li] : BlockWeightGradInputs{},
                   &moe);
    release_params(block_unit(l));
    grads_done(block_unit(l));
    std::swap(dres, dnext);
  }
  if (!range_.embedding) return dres;
  acquire_grads(0);
  embedding_layer_backward(s, tp_, local_, {dwte_, dwpe_}, dres, sc.partial, a.tokens, T_, dropout_site(a.options, -1),
                           cp_ ? &cp_->split() : nullptr);
  grads_done(0);
  return Tensor{};
}

void Stage::backward_weights(int slot) {
  Activations& a = acts_[static_cast<size_t>(slot)];
  MT_CHECK(options_.split_backward && a.options.grad == LossGrad::in_place,
           "backward_weights() needs a stage built with split_backward and a training forward");
  const Stream& s = stream_;
  if (range_.head) {
    acquire_grads(head_unit());
    if (!shares_embedding()) linear_weight_backward(s, dhead_, Tensor{}, a.logits, a.head_in);  // [Note: tied head]
    release_grads(head_unit());
  }
  for (int l = range_.layers - 1; l >= 0; --l) {
    const auto li = static_cast<size_t>(l);
    acquire_grads(block_unit(l));
    block_weight_backward(s, tp_, g_[li], a.blocks[li], scratch_.block, a.deferred[li]);
    release_grads(block_unit(l));
  }
  if (range_.embedding) release_grads(0);
}

}  // namespace megatrain
