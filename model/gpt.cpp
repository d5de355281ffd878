#include "model/gpt.h"

#include <cstring>

#include "model/linear.h"
#include "model/loss.h"

namespace megatrain {

GptModel::GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len, UnitState* state, TensorParallel tp)
    : cfg_(cfg), B_(micro_batch_size), T_(seq_len), tp_(std::move(tp)),
      local_(local_dims(cfg, TpCoord{tp_.rank(), tp_.size()})),
      layout_(gpt_param_layout(cfg, TpCoord{tp_.rank(), tp_.size()}, tp_.sequence_parallel())),
      units_(gpt_param_units(layout_, cfg)), state_(state) {
  MT_CHECK(seq_len <= cfg.max_seq_len, "seq_len {} > max_seq_len {}", seq_len, cfg.max_seq_len);
  for (int l = 0; l < cfg_.n_layers; ++l) block_index_.push_back(block_param_index(layout_, l));
  wte_index_ = layout_.index_of("embed.wte");
  if (layout_.contains("embed.wpe")) wpe_index_ = layout_.index_of("embed.wpe");
  head_index_ = cfg_.tie_embeddings ? wte_index_ : layout_.index_of("lm_head.weight");
  final_w_index_ = layout_.index_of("final_norm.weight");
  if (layout_.contains("final_norm.bias")) final_b_index_ = layout_.index_of("final_norm.bias");
  Arena measure = Arena::measuring();
  plan(measure);
  arena_ = Arena(measure.used());
  plan(arena_);
  w_.resize(static_cast<size_t>(cfg_.n_layers));
  g_.resize(static_cast<size_t>(cfg_.n_layers));
  // [Note: unit order] forward reads the units in order; the tied head reads the embedding again
  // at the end, so the embedding stays acquired through the forward pass. Backward reads the head
  // unit (and the tied embedding) first, then the blocks in reverse; the embedding's backward is a
  // scatter-add that reads no weights, so an untied embedding is not asked for in backward.
  const int last = cfg_.n_layers + 1;
  for (int u = 0; u <= last; ++u) forward_order_.push_back(u);
  backward_order_.push_back(last);
  if (cfg_.tie_embeddings) backward_order_.push_back(0);
  for (int u = last - 1; u >= 1; --u) backward_order_.push_back(u);
}

GptModel::GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len, UnitState& state, const Comm& tp,
                   const TpOptions& options)
    : GptModel(cfg, micro_batch_size, seq_len, &state,
               TensorParallel(tp, options, static_cast<int64_t>(micro_batch_size) * seq_len, cfg.d_model)) {}

GptModel::GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len, UnitState& state)
    : GptModel(cfg, micro_batch_size, seq_len, &state,
               TensorParallel(static_cast<int64_t>(micro_batch_size) * seq_len, cfg.d_model)) {}

GptModel::GptModel(const ModelConfig& cfg, int micro_batch_size, int seq_len)
    : GptModel(cfg, micro_batch_size, seq_len, nullptr,
               TensorParallel(static_cast<int64_t>(micro_batch_size) * seq_len, cfg.d_model)) {
  params_ = FlatBuffer(layout_.total());
  grads_ = FlatBuffer(layout_.total());
  own_state_ = std::make_unique<FullState>(units_, params_.data(), grads_.data());
  state_ = own_state_.get();
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    acquire_params(u);
    acquire_grads(u);
  }
}

// Points the views of `unit` (blocks, wte, wpe, head, final norm — of parameters or of gradients)
// at p, which holds the unit's flat range.
void GptModel::bind_unit(int unit, float* p, UnitViews v) const {
  const int64_t begin = units_[static_cast<size_t>(unit)].begin;
  auto view = [&](size_t i) { return i == BlockParamIndex::kAbsent ? Tensor{} : layout_.view_in(p, begin, i); };
  if (unit == 0) {
    v.wte = view(wte_index_);
    v.wpe = view(wpe_index_);
    if (cfg_.tie_embeddings) v.head = v.wte;
  } else if (unit == cfg_.n_layers + 1) {
    v.final_norm.weight = view(final_w_index_);
    v.final_norm.bias = view(final_b_index_);
    if (!cfg_.tie_embeddings) v.head = view(head_index_);
  } else {
    const auto l = static_cast<size_t>(unit - 1);
    v.blocks[l] = block_weights(layout_, block_index_[l], p, begin);
  }
}

void GptModel::plan(Arena& arena) {
  const int64_t N = static_cast<int64_t>(B_) * T_, Nl = tp_.local_rows(), C = cfg_.d_model;
  const bool sp = tp_.sequence_parallel();
  act_.tokens = Tensor(arena.alloc_i32(N), Shape{B_, T_});
  act_.targets = Tensor(arena.alloc_i32(N), Shape{B_, T_});
  act_.residual.clear();
  act_.blocks.clear();
  for (int l = 0; l <= cfg_.n_layers; ++l) act_.residual.push_back(arena.tensor(Shape{Nl, C}));
  for (int l = 0; l < cfg_.n_layers; ++l) act_.blocks.push_back(block_activations(arena, cfg_, tp_, B_, T_));
  act_.final_norm = norm_activations(arena, cfg_, Nl);
  act_.head_in = sp ? arena.tensor(Shape{N, C}) : act_.final_norm.out;
  act_.logits = arena.tensor(Shape{N, local_.vocab});
  act_.losses = arena.tensor(Shape{N});
  act_.row_max = arena.tensor(Shape{N});
  act_.sums = arena.tensor(Shape{2, N});
  scratch_.block = block_scratch(arena, cfg_, tp_, B_, T_);
  scratch_.dres_a = arena.tensor(Shape{Nl, C});
  scratch_.dres_b = arena.tensor(Shape{Nl, C});
}

void GptModel::zero_grads() {
  float* g = grads();
  const int64_t n = grads_.size();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
}

DropoutSite GptModel::dropout_site(int layer) const {
  DropoutSite d;
  if (!last_.dropout || cfg_.dropout <= 0.0f) return d;
  d.p = cfg_.dropout;
  d.seed = last_.dropout_seed;
  d.stream_base = static_cast<uint32_t>(2 * (layer + 1));  // stream 0 is the embedding's
  d.offset = (last_.first_sample * static_cast<uint64_t>(T_) + static_cast<uint64_t>(tp_.first_row())) *
             static_cast<uint64_t>(cfg_.d_model);
  return d;
}

float GptModel::forward(const int32_t* inputs, const int32_t* targets, const ForwardOptions& opt) {
  const Stream& s = stream_;
  const int64_t N = static_cast<int64_t>(B_) * T_;
  last_ = opt;
  for (int64_t i = 0; i < N; ++i) {
    MT_CHECK(inputs[i] >= 0 && inputs[i] < cfg_.vocab_size && targets[i] >= 0 && targets[i] < cfg_.vocab_size,
             "token id out of range [0, {}) at position {}: the dataset's tokenizer does not match model.vocab_size",
             cfg_.vocab_size, i);
  }
  std::memcpy(act_.tokens.data, inputs, sizeof(int32_t) * static_cast<size_t>(N));
  std::memcpy(act_.targets.data, targets, sizeof(int32_t) * static_cast<size_t>(N));
  const int last = cfg_.n_layers + 1;
  const bool sp = tp_.sequence_parallel();
  BlockScratch& sc = scratch_.block;
  state_->begin_pass(forward_order_);
  acquire_params(0);
  // Vocabulary-parallel embedding: each rank looks up its rows, the partial sums leave the tp region.
  const Tensor emb = sp ? sc.partial : act_.residual[0];
  embedding_forward(s, emb, act_.tokens, wte_, local_.vocab_begin);
  tp_.leave_forward(act_.residual[0], emb);
  if (wpe_.data) position_embedding_forward(s, act_.residual[0], wpe_, T_, tp_.first_row());
  if (!cfg_.tie_embeddings) state_->unit_params_done(0);
  const DropoutSite emb_drop = dropout_site(-1);
  if (emb_drop.p > 0.0f)
    dropout_apply(s, act_.residual[0], emb_drop.p,
                  RngKey{emb_drop.seed, static_cast<uint32_t>(RngPurpose::dropout), 0, emb_drop.offset});
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const auto li = static_cast<size_t>(l);
    acquire_params(l + 1);
    block_forward(s, cfg_, tp_, act_.residual[li + 1], act_.blocks[li], sc, act_.residual[li], w_[li],
                  dropout_site(l));
    state_->unit_params_done(l + 1);
  }
  acquire_params(last);
  norm_forward(s, cfg_, act_.final_norm, act_.residual.back(), final_w_);
  tp_.enter_forward(act_.head_in, act_.final_norm.out);
  column_parallel_forward(s, act_.logits, act_.head_in, head_, Tensor{});
  state_->unit_params_done(last);
  if (cfg_.tie_embeddings) state_->unit_params_done(0);
  vocab_parallel_cross_entropy(s, tp_, local_, act_.losses, act_.logits, act_.row_max, act_.sums, act_.targets,
                               opt.grad, opt.dloss_scale);
  double sum = 0.0;
  const float* losses = act_.losses.f32();
  for (int64_t i = 0; i < N; ++i) sum += losses[i];
  return static_cast<float>(sum / static_cast<double>(N));
}

void GptModel::backward() {
  MT_CHECK(last_.grad == LossGrad::in_place, "backward() needs a forward() with LossGrad::in_place");
  const Stream& s = stream_;
  Tensor dres = scratch_.dres_a, dnext = scratch_.dres_b;
  const int last = cfg_.n_layers + 1;
  const bool tied = cfg_.tie_embeddings;
  state_->begin_pass(backward_order_);
  acquire_params(last);
  acquire_grads(last);
  if (tied) {
    acquire_params(0);
    acquire_grads(0);
  }
  BlockScratch& sc = scratch_.block;
  const bool sp = tp_.sequence_parallel();
  column_parallel_backward(s, tp_, sc.dnorm, sp ? sc.dfull : sc.dnorm, dhead_, Tensor{}, act_.logits, act_.head_in,
                           head_);
  norm_backward(s, cfg_, dres, final_g_, sc.dnorm, Tensor{}, act_.final_norm, act_.residual.back(), final_w_);
  state_->unit_params_done(last);
  if (tied) state_->unit_params_done(0);
  state_->unit_grads_done(last);
  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    const auto li = static_cast<size_t>(l);
    acquire_params(l + 1);
    acquire_grads(l + 1);
    block_backward(s, cfg_, tp_, dnext, g_[li], dres, act_.blocks[li], sc, act_.residual[li], w_[li],
                   dropout_site(l));
    state_->unit_params_done(l + 1);
    state_->unit_grads_done(l + 1);
    std::swap(dres, dnext);
  }
  const DropoutSite emb = dropout_site(-1);
  if (emb.p > 0.0f)
    dropout_apply(s, dres, emb.p, RngKey{emb.seed, static_cast<uint32_t>(RngPurpose::dropout), 0, emb.offset});
  acquire_grads(0);
  if (dwpe_.data) position_embedding_backward(s, dwpe_, dres, T_, tp_.first_row());
  const Tensor demb = sp ? sc.partial : dres;
  tp_.leave_backward(demb, dres);
  embedding_backward(s, dwte_, demb, act_.tokens, local_.vocab_begin);
  state_->unit_grads_done(0);
}

double GptModel::flops_per_token(const ModelConfig& cfg, int seq_len) {
  // 6 FLOPs per weight per token (2 forward, 4 backward) for every matrix multiply, including
  // the LM head; attention scores and weighted sum: 2·2·T·d per layer forward, halved for the
  // causal mask, ×3 for forward + backward. Embedding lookups and norms are not counted.
  const double C = cfg.d_model, L = cfg.n_layers, D = cfg.head_dim();
  const double H = cfg.n_heads, Hkv = cfg.kv_heads(), F = cfg.ffn_dim();
  const double fc_out = cfg.activation == ActivationKind::swiglu ? 2 * F : F;
  const double per_layer = C * (H + 2 * Hkv) * D + H * D * C + C * fc_out + F * C;
  const double matmul_weights = L * per_layer + static_cast<double>(cfg.padded_vocab(1)) * C;
  const double attention = L * 3.0 * (2.0 * 2.0 * seq_len * H * D) / 2.0;
  return 6.0 * matmul_weights + attention;
}

}  // namespace megatrain
