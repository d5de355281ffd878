#include "model/stage.h"

#include <algorithm>

#include "model/linear.h"
#include "model/loss.h"

namespace megatrain {

Stage::Stage(const ModelConfig& cfg, int micro_batch_size, int seq_len, const ParamLayout& layout, StageRange range,
             const StageOptions& options, UnitState& state, TensorParallel tp, StageExperts experts,
             StageContext context)
    : spec_(stage_spec(cfg, micro_batch_size, seq_len, range, options, tp, layout.ep().size, context.split,
                       context.algorithm)),
      layout_(layout),
      tp_(std::move(tp)),
      local_(local_dims(cfg, TpCoord{tp_.rank(), tp_.size()})),
      stream_{options.device, nullptr, options.matmul},
      binder_(cfg, layout, range, state, experts.state, options.device),
      moe_stats_(cfg, range) {
  MT_CHECK(layout.tp().rank == tp_.rank() && layout.tp().size == tp_.size(),
           "the layout is for tp rank {} of {}, the stage runs as rank {} of {}", layout.tp().rank, layout.tp().size,
           tp_.rank(), tp_.size());
  arena_ = Arena(plan_stage(spec_).bytes, stream_);
  buf_ = allocate_stage(arena_, spec_);
  slot_options_.resize(buf_.slots.size());
  slot_documents_.resize(buf_.slots.size());
  attention_ = make_attention(spec_.attention, buf_.scratch.attention, std::move(context.cp));
  if (binder_.has_experts()) {
    dispatch_.emplace(experts.ep, cfg.moe.n_experts, cfg.d_model, stream_);
    MT_CHECK(dispatch_->ep_size() == layout.ep().size, "the layout is for ep = {}, the stage's group has {} ranks",
             layout.ep().size, dispatch_->ep_size());
  }
  if (range.head && stream_.device != Device::cpu)
    host_losses_.resize(static_cast<size_t>(micro_batch_size) * static_cast<size_t>(seq_len));
}

MoeRuntime Stage::moe_runtime(const ForwardOptions& o) {
  MoeRuntime r;
  if (!dispatch_) return r;
  const ModelConfig& cfg = spec_.cfg;
  r.spec = router_spec(cfg.moe);
  r.dispatch = &*dispatch_;
  r.aux_coef = cfg.moe.aux_loss_coef;
  r.z_coef = cfg.moe.z_loss_coef;
  r.loss_grad = o.dloss_scale * static_cast<float>(spec_.B * spec_.T);  // ∂L/∂(mean token loss of the micro-batch)
  r.scratch = &buf_.scratch.moe;
  r.sequence = attention_.get();
  r.dispatch_ms = moe_stats_.dispatch_clock();
  return r;
}

DropoutSite Stage::dropout_site(const ForwardOptions& o, int layer) const {
  DropoutSite d;
  if (!o.dropout || spec_.cfg.dropout <= 0.0f) return d;
  d.p = spec_.cfg.dropout;
  d.seed = o.dropout_seed;
  d.stream_base = static_cast<uint32_t>(2 * (layer + 1));  // stream 0 is the embedding's; layer: global index
  // Each rank keys its rows as if they followed the other ranks' of the sample (context
  // parallelism): masks distinct on every rank, not the single process's (whose rows are in another order).
  const RowPositions& p = attention_->positions();
  d.offset = (o.first_sample * static_cast<uint64_t>(p.seq_len()) + static_cast<uint64_t>(p.rows_before()) +
              static_cast<uint64_t>(tp_.first_row())) *
             static_cast<uint64_t>(spec_.cfg.d_model);
  return d;
}

void Stage::recompute(int l, SlotActivations& a, const ForwardOptions& o) {
  const auto li = static_cast<size_t>(l);
  StageScratch& sc = buf_.scratch;
  if (spec_.fully_recomputed(l)) {
    const MoeRuntime moe = moe_runtime(o);
    block_forward(stream_, spec_.cfg, tp_, sc.recomputed_out, a.blocks[li], sc.block, a.residual[li],
                  binder_.params().blocks[li], *attention_, dropout_site(o, spec_.range.first_layer + l), &moe);
  } else if (spec_.options.recompute == Recompute::selective) {
    attention_->forward(stream_, a.blocks[li].attn.att, a.blocks[li].attn.lse, a.blocks[li].attn.qkv);
  }
}

void Stage::use_documents(int slot) {
  const SlotDocuments& d = slot_documents_[static_cast<size_t>(slot)];
  attention_->use(d.positions ? &*d.positions : nullptr, d.starts.empty() ? nullptr : d.starts.data());
}

Tensor Stage::logits(int slot) const {
  MT_CHECK(spec_.range.head && slot_options_[static_cast<size_t>(slot)].grad == LossGrad::none,
           "logits() needs the last stage and a preceding forward() with LossGrad::none");
  return buf_.slots[static_cast<size_t>(slot)].logits;
}

void Stage::check_ids(const int32_t* ids, const char* what, bool masked_allowed) const {
  const int64_t N = int64_t{spec_.B} * spec_.T;
  for (int64_t i = 0; i < N; ++i)
    MT_CHECK((ids[i] >= 0 || (masked_allowed && ids[i] == kMaskedTarget)) && ids[i] < spec_.cfg.vocab_size,
             "{} id {} out of range [0, {}) at position {}: the dataset's tokenizer does not match model.vocab_size",
             what, ids[i], spec_.cfg.vocab_size, i);
}

float Stage::forward(int slot, const MicroBatch& mb, Tensor input) {
  const Stream& s = stream_;
  const ModelConfig& cfg = spec_.cfg;
  const StageRange& range = spec_.range;
  SlotActivations& a = buf_.slots[static_cast<size_t>(slot)];
  const ForwardOptions& o = slot_options_[static_cast<size_t>(slot)] = mb.options;
  SlotDocuments& docs = slot_documents_[static_cast<size_t>(slot)];
  docs.positions.reset();
  if (mb.position_starts) docs.positions = RowPositions::restarted(attention_->base_positions(), mb.position_starts);
  const int64_t whole = int64_t{spec_.B} * attention_->base_positions().seq_len();
  if (mb.attention_starts)
    docs.starts.assign(mb.attention_starts, mb.attention_starts + whole);
  else
    docs.starts.clear();
  use_documents(slot);
  const int64_t N = int64_t{spec_.B} * spec_.T;
  BlockScratch& sc = buf_.scratch.block;
  const StageWeights& w = binder_.params();
  binder_.begin_forward();
  const MoeRuntime moe = moe_runtime(o);
  if (range.embedding) {
    check_ids(mb.tokens, "token");
    copy_from_host(s, a.tokens, mb.tokens);
    binder_.acquire_params(binder_.embedding_unit());
    embedding_layer_forward(s, tp_, local_, a.residual[0], sc.partial, a.tokens, {w.wte, w.wpe},
                            attention_->positions(), dropout_site(o, -1));
    if (!binder_.shares_embedding()) binder_.release_params(binder_.embedding_unit());
  } else {
    MT_CHECK(input.numel() == a.residual[0].numel(), "stage input of {} floats, expected {}", input.numel(),
             a.residual[0].numel());
    copy(s, a.residual[0], input);
  }
  for (int l = 0; l < range.layers; ++l) {
    const auto li = static_cast<size_t>(l);
    binder_.acquire_params(binder_.block_unit(l));
    block_forward(s, cfg, tp_, a.residual[li + 1], a.blocks[li], sc, a.residual[li], w.blocks[li], *attention_,
                  dropout_site(o, range.first_layer + l), &moe);
    binder_.release_params(binder_.block_unit(l));
    if (spec_.moe[li] && o.grad != LossGrad::none) moe_stats_.add(l, a.blocks[li].moe.stats, N);
  }
  if (!range.head) return 0.0f;
  check_ids(mb.targets, "target", true);
  copy_from_host(s, a.targets, mb.targets);
  binder_.acquire_params(binder_.head_unit());
  norm_forward(s, cfg, a.final_norm, a.residual.back(), w.final_norm);
  tp_.enter_forward(a.head_in, a.final_norm.out);
  column_parallel_forward(s, a.logits, a.head_in, w.head, Tensor{});
  binder_.release_params(binder_.head_unit());
  if (binder_.shares_embedding()) binder_.release_params(binder_.embedding_unit());
  vocab_parallel_cross_entropy(s, tp_, local_, a.losses, a.logits, a.row_max, a.sums, a.targets, o.grad, o.dloss_scale);
  const float* losses = a.losses.f32();
  if (s.device != Device::cpu) {  // read back from the device; on CPU the losses are host memory already
    copy_to_host(s, host_losses_.data(), a.losses);
    losses = host_losses_.data();
  }
  double sum = 0.0;
  for (int64_t i = 0; i < N; ++i) sum += losses[i];
  return static_cast<float>(sum / static_cast<double>(N));
}

// The head's backward into dres: the loss gradient left in the logits through the head and the final norm.
void Stage::head_backward(SlotActivations& a, Tensor dres, bool defer) {
  const bool tied = binder_.shares_embedding(), sp = tp_.sequence_parallel();
  const StageWeights &w = binder_.params(), &g = binder_.grads();
  BlockScratch& sc = buf_.scratch.block;
  binder_.acquire_params(binder_.head_unit());
  binder_.acquire_grads(binder_.head_unit());
  if (tied) {
    binder_.acquire_params(binder_.embedding_unit());
    binder_.acquire_grads(binder_.embedding_unit());
  }
  // [Note: tied head] a head tied to this stage's embedding keeps its weight gradient in B, so the
  // two contributions to the one gradient add in the same order as without the split.
  column_parallel_backward(stream_, tp_, sc.dnorm, sp ? sc.dfull : sc.dnorm, defer && !tied ? Tensor{} : g.head,
                           Tensor{}, a.logits, a.head_in, w.head);
  norm_backward(stream_, spec_.cfg, dres, g.final_norm, sc.dnorm, Tensor{}, a.final_norm, a.residual.back(),
                w.final_norm);
  binder_.release_params(binder_.head_unit());
  if (tied) binder_.release_params(binder_.embedding_unit());
  if (!defer) binder_.release_grads(binder_.head_unit());
}

Tensor Stage::backward_pass(int slot, Tensor dout, bool defer) {
  SlotActivations& a = buf_.slots[static_cast<size_t>(slot)];
  const ForwardOptions& o = slot_options_[static_cast<size_t>(slot)];
  MT_CHECK(o.grad == LossGrad::in_place, "backward() needs a forward() with LossGrad::in_place");
  MT_CHECK(!defer || spec_.options.split_backward, "backward_input() needs a stage built with split_backward");
  // A split backward hands the gradients back in backward_weights(), after their last write.
  const auto grads_done = [&](int unit) {
    if (!defer) binder_.release_grads(unit);
  };
  use_documents(slot);
  const Stream& s = stream_;
  const StageRange& range = spec_.range;
  Tensor dres = buf_.scratch.dres_a, dnext = buf_.scratch.dres_b;
  BlockScratch& sc = buf_.scratch.block;
  const StageWeights &w = binder_.params(), &g = binder_.grads();
  binder_.begin_backward();
  const MoeRuntime moe = moe_runtime(o);
  if (range.head) {
    head_backward(a, dres, defer);
  } else {
    MT_CHECK(dout.numel() == dres.numel(), "stage output gradient of {} floats, expected {}", dout.numel(),
             dres.numel());
    copy(s, dres, dout);
  }
  for (int l = range.layers - 1; l >= 0; --l) {
    const auto li = static_cast<size_t>(l);
    binder_.acquire_params(binder_.block_unit(l));
    recompute(l, a, o);
    binder_.acquire_grads(binder_.block_unit(l));
    block_backward(s, spec_.cfg, tp_, dnext, g.blocks[li], dres, a.blocks[li], sc, a.residual[li], w.blocks[li],
                   *attention_, dropout_site(o, range.first_layer + l),
                   defer ? a.deferred[li] : BlockWeightGradInputs{}, &moe);
    binder_.release_params(binder_.block_unit(l));
    grads_done(binder_.block_unit(l));
    std::swap(dres, dnext);
  }
  if (!range.embedding) return dres;
  binder_.acquire_grads(binder_.embedding_unit());
  embedding_layer_backward(s, tp_, local_, {g.wte, g.wpe}, dres, sc.partial, a.tokens, attention_->positions(),
                           dropout_site(o, -1));
  grads_done(binder_.embedding_unit());
  return Tensor{};
}

void Stage::backward_weights(int slot) {
  SlotActivations& a = buf_.slots[static_cast<size_t>(slot)];
  MT_CHECK(spec_.options.split_backward && slot_options_[static_cast<size_t>(slot)].grad == LossGrad::in_place,
           "backward_weights() needs a stage built with split_backward and a training forward");
  const StageWeights& g = binder_.grads();
  if (spec_.range.head) {
    binder_.acquire_grads(binder_.head_unit());
    if (!binder_.shares_embedding())  // [Note: tied head]
      linear_weight_backward(stream_, g.head, Tensor{}, a.logits, a.head_in);
    binder_.release_grads(binder_.head_unit());
  }
  for (int l = spec_.range.layers - 1; l >= 0; --l) {
    const auto li = static_cast<size_t>(l);
    binder_.acquire_grads(binder_.block_unit(l));
    block_weight_backward(stream_, tp_, g.blocks[li], a.blocks[li], buf_.scratch.block, a.deferred[li]);
    binder_.release_grads(binder_.block_unit(l));
  }
  if (spec_.range.embedding) binder_.release_grads(binder_.embedding_unit());
}

}  // namespace megatrain
