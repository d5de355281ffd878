// Stage: one pipeline stage of a decoder-only transformer (docs/architecture.md §Stages) — a contiguous range of
// blocks, plus the token (+ position) embedding on the first stage and the final norm, LM head and
// cross-entropy on the last; at pp = 1 the one stage holds all of them. Tensor-parallel
// (model/block.h, model/loss.h): this rank holds its heads, MLP units and vocabulary rows, the
// embedding is vocabulary-parallel and the loss is computed without gathering the logits.
//
// Parameters and gradients are reached one way only: per unit (stage_param_units), through the
// UnitState while the unit is in use (full buffers, or ZeRO gathering and reducing them across
// data-parallel ranks). Activations are saved per micro-batch *slot*: forward(slot, …) fills the
// slot, backward(slot, …) consumes it, so a pipeline schedule keeps several micro-batches in flight.
// All activation memory is planned at construction (model/stage_plan.h), and a step allocates,
// looks up and formats nothing. The parts are chosen once there too: the attention core
// (model/attention_parts.h), the unit binder (model/unit_binder.h), the MoE statistics
// (model/moe_stats.h).
//
// [Note: grad accumulation] backward() `+=` into the gradients the UnitState provides, so running
// every micro-batch of a step accumulates the step's gradient. The loss gradient is scaled by
// ForwardOptions::dloss_scale (1 / tokens in the global batch), which makes the accumulated gradient
// that of the mean loss over the global batch.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "model/moe_stats.h"
#include "model/stage_plan.h"
#include "model/unit_binder.h"
#include "parallel/expert_dispatch.h"
#include "parallel/mappings.h"

namespace megatrain {

struct ForwardOptions {
  LossGrad grad = LossGrad::none;
  float dloss_scale = 0.0f;  // ∂(global loss)/∂(token loss)
  bool dropout = false;      // training mode
  uint64_t dropout_seed = 0;
  uint64_t first_sample = 0;  // global index of the micro-batch's first sample (keys dropout)
};

// Activation recompute (model/recompute.h): full covers recompute_layers blocks, the first ones of
// the stage (all when 0). Results are bitwise those without: the recomputation runs the same
// kernels on the same inputs, and dropout masks are keyed, not drawn.

// One micro-batch: (B, T) token ids, read by the first stage, and targets, read by the last (a
// kMaskedTarget target is left out of the loss: a masked position). Several documents packed into each
// sequence (data.reset_position_ids, reset_attention_mask): starts, (B, T) of whole sequences, the
// first position of each position's document, read by every stage — positions restart at each
// document where position_starts is set, attention stays within each where attention_starts is.
struct MicroBatch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  ForwardOptions options;
  const int32_t* position_starts = nullptr;
  const int32_t* attention_starts = nullptr;
};

// The expert parameters of a stage's MoE blocks ([Note: expert tensors] in model/params.h): their
// state provides the units of moe_expert_units(layout, range); `ep` is the expert-parallel group
// (nullopt: ep = 1).
struct StageExperts {
  UnitState* state = nullptr;
  std::optional<Comm> ep;
};

// Context parallelism (parallel.cp > 1, model/attention_parts.h): the group, its algorithm and this
// rank's split of each sequence. split.cp = 1: none.
struct StageContext {
  std::optional<Comm> cp;
  CpComm algorithm = CpComm::ring;
  CpSplit split;
};

class Stage {
 public:
  // `layout` is gpt_param_layout(cfg, tp's coordinates, sequence parallel, range, ep's coordinates),
  // the one the caller sized `state` by; both must outlive the stage, and `state` provides the
  // units of gpt_param_units(layout, range). A model with MoE blocks needs `experts`. seq_len is the
  // rows of a sequence the stage holds: with context parallelism context.split.local_len().
  Stage(const ModelConfig& cfg, int micro_batch_size, int seq_len, const ParamLayout& layout, StageRange range,
        const StageOptions& options, UnitState& state, TensorParallel tp, StageExperts experts = {},
        StageContext context = {});

  const ModelConfig& config() const { return spec_.cfg; }
  const StageRange& range() const { return spec_.range; }
  const ParamLayout& layout() const { return layout_; }
  const std::vector<FlatRange>& units() const { return binder_.units(); }
  int slots() const { return static_cast<int>(buf_.slots.size()); }
  size_t activation_bytes() const { return arena_.capacity(); }
  DType activation_dtype() const { return spec_.act; }  // [Note: activation dtype]

  // Runs micro-batch `mb` into `slot`. The first stage embeds mb.tokens; a later one starts from
  // `input`, the (rows, C) output of the stage before. Returns, on the last stage, the mean loss over
  // the B·T tokens (and with LossGrad::in_place leaves its gradient for backward); 0 elsewhere.
  float forward(int slot, const MicroBatch& mb, Tensor input = {});
  // The hidden state this (non-last) stage hands on: valid until the slot's next forward.
  Tensor output(int slot) const { return buf_.slots[static_cast<size_t>(slot)].residual.back(); }
  // Backward of the micro-batch in `slot` (its forward used LossGrad::in_place): from the loss on
  // the last stage, else from `dout`, the gradient of output(slot). Returns the gradient of the
  // stage's input (empty on the first stage), valid until the next backward().
  Tensor backward(int slot, Tensor dout = {}) { return backward_pass(slot, dout, false); }
  // The split backward of zero-bubble schedules (needs StageOptions::split_backward): backward_input
  // is backward() without the weight gradients of the linear layers (QKV, projections, MLP, head),
  // whose output gradients it keeps in the slot; backward_weights(slot) then adds those. Together
  // they add bitwise what backward() adds. Gradients are handed back (UnitState::unit_grads_done)
  // by backward_weights, so ZeRO must not reduce them per backward (stages 0 and 1).
  Tensor backward_input(int slot, Tensor dout = {}) { return backward_pass(slot, dout, true); }
  void backward_weights(int slot);

  // Per MoE block of the stage (model order): its routing over the training forwards since the
  // last reset, and the time spent moving tokens.
  MoeStats& moe_stats() { return moe_stats_; }
  const MoeStats& moe_stats() const { return moe_stats_; }

  // Logits (B·T, Vl) of the slot's last forward: this rank's vocabulary rows; columns past the
  // vocabulary are padding. Only after LossGrad::none (in_place overwrites them with their gradient).
  Tensor logits(int slot) const;

 private:
  Tensor backward_pass(int slot, Tensor dout, bool defer);
  void head_backward(SlotActivations& a, Tensor dres, bool defer);
  DropoutSite dropout_site(const ForwardOptions& o, int layer) const;
  // Rebuilds in backward what the forward of block l did not keep.
  void recompute(int l, SlotActivations& a, const ForwardOptions& o);
  MoeRuntime moe_runtime(const ForwardOptions& o);
  // Checks a micro-batch's ids (tokens or targets) against the vocabulary; masked_allowed: targets,
  // where kMaskedTarget leaves a position out.
  void check_ids(const int32_t* ids, const char* what, bool masked_allowed = false) const;

  StageSpec spec_;
  const ParamLayout& layout_;
  TensorParallel tp_;
  LocalDims local_;
  Stream stream_;
  UnitBinder binder_;
  Arena arena_;
  StageBuffers buf_;
  // The micro-batch's documents, of each slot's forward for its backward (MicroBatch): the rows'
  // restarted positions and the starts for the attention; empty where the micro-batch had none.
  struct SlotDocuments {
    std::optional<RowPositions> positions;
    std::vector<int32_t> starts;
  };
  void use_documents(int slot);

  std::vector<ForwardOptions> slot_options_;  // of each slot's forward, for its backward
  std::vector<SlotDocuments> slot_documents_;
  std::unique_ptr<AttentionCore> attention_;
  std::vector<float> host_losses_;          // the last stage's token losses, read back from the stream's device
  std::optional<ExpertDispatch> dispatch_;  // MoE blocks: the token exchange
  MoeStats moe_stats_;
};

}  // namespace megatrain
