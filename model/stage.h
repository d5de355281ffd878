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
// All activation memory is planned at construction, and a step allocates, looks up and formats
// nothing.
//
// [Note: grad accumulation] backward() `+=` into the gradients the UnitState provides, so running
// every micro-batch of a step accumulates the step's gradient. The loss gradient is scaled by
// ForwardOptions::dloss_scale (1 / tokens in the global batch), which makes the accumulated gradient
// that of the mean loss over the global batch.
#pragma once
#include <optional>
#include <vector>

#include "kernels/ops.h"
#include "model/block.h"
#include "model/config.h"
#include "model/params.h"
#include "model/recompute.h"
#include "model/unit_state.h"
#include "parallel/mappings.h"

namespace megatrain {

struct ForwardOptions {
  LossGrad grad = LossGrad::none;
  float dloss_scale = 0.0f;     // ∂(global loss)/∂(token loss)
  bool dropout = false;         // training mode
  uint64_t dropout_seed = 0;
  uint64_t first_sample = 0;    // global index of the micro-batch's first sample (keys dropout)
};

// Activation recompute (model/recompute.h): full covers recompute_layers blocks, the first ones of
// the stage (all when 0). Results are bitwise those without: the recomputation runs the same
// kernels on the same inputs, and dropout masks are keyed, not drawn.

struct StageOptions {
  int slots = 1;                // micro-batches in flight (see above)
  bool split_backward = false;  // keep what backward_input() leaves to backward_weights()
  Recompute recompute = Recompute::none;
  int recompute_layers = 0;     // full recompute: blocks covered, from the stage's first; 0: all
  Precision matmul = Precision::fp32;  // what the linear layers multiply (kernels/device.h)
  // Where the stage computes: its activations live in that device's memory, and the UnitState's
  // parameters and gradients must too (tokens and targets come from the host).
  Device device = Device::cpu;
  bool bf16_activations = true;  // [Note: activation dtype]
  // Plan the activations without allocating them (planner/plan_memory.h): activation_bytes() says
  // what the stage would hold; such a stage never runs, so its state and tp need no communicator.
  bool measure_only = false;
};

// One micro-batch: (B, T) token ids, read by the first stage, and targets, read by the last.
struct MicroBatch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  ForwardOptions options;
};

// The routing of one MoE block over a training step, summed over its micro-batches (for logging).
struct MoeLayerStats {
  int layer = 0;                 // the block's index in the model
  std::vector<int64_t> tokens;   // per expert: kept assignments
  std::vector<int64_t> step_tokens;  // the same over the running step only (reset_step_tokens)
  int64_t dropped = 0, assignments = 0;
  double aux = 0.0, z = 0.0;     // sums of the micro-batches' losses
  int64_t micro_batches = 0;
};

// The expert parameters of a stage's MoE blocks ([Note: expert tensors] in model/params.h): their
// state provides the units of moe_expert_units(layout, range); `ep` is the expert-parallel group
// (nullopt: ep = 1).
struct StageExperts {
  UnitState* state = nullptr;
  std::optional<Comm> ep;
};

// [Note: activation dtype] What a stage keeps the activations its GEMMs and attention read in
// (kernels/ops.h [Note: bf16 activations]): the norm outputs (the blocks' and the final one), q/k/v,
// the attention output and the MLP's hidden tensors, with the gradients the GEMMs read at q/k/v and
// the MLP's first output. bf16 on a CPU stream of bf16 precision: they are saved for backward and
// read by bf16 GEMMs, so half the bytes and no rounding pass; the ops compute in float32 and round
// each result once. The residual stream, the gradients flowing into float32 sums (norms, tp
// reductions), statistics and log-sum-exp stay f32. float32 elsewhere: fp32 and fp16 runs, CUDA
// streams (the device kernels read float32) and context parallelism (its block ops are float32),
// and where train.bf16_activations = false asks for float32 (a like-with-like reference for those).
struct ActivationDtype {
  DType dtype = DType::f32;
  const char* why = "";  // for the start-up log
};
ActivationDtype activation_dtype(Precision matmul, Device device, int cp, bool bf16_activations = true);

// Context parallelism (parallel.cp > 1, model/context_attention.h): the group, its algorithm and
// this rank's split of each sequence. split.cp = 1: none.
struct StageContext {
  std::optional<Comm> cp;  // nullopt only with StageOptions::measure_only
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

  const ModelConfig& config() const { return cfg_; }
  const StageRange& range() const { return range_; }
  const ParamLayout& layout() const { return layout_; }
  const std::vector<FlatRange>& units() const { return units_; }
  int slots() const { return static_cast<int>(acts_.size()); }
  size_t activation_bytes() const { return options_.measure_only ? measured_bytes_ : arena_.capacity(); }
  DType activation_dtype() const { return act_; }  // [Note: activation dtype]

  // Runs micro-batch `mb` into `slot`. The first stage embeds mb.tokens; a later one starts from
  // `input`, the (rows, C) output of the stage before. Returns, on the last stage, the mean loss over
  // the B·T tokens (and with LossGrad::in_place leaves its gradient for backward); 0 elsewhere.
  float forward(int slot, const MicroBatch& mb, Tensor input = {});
  // The hidden state this (non-last) stage hands on: valid until the slot's next forward.
  Tensor output(int slot) const { return acts_[static_cast<size_t>(slot)].residual.back(); }
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
  // last reset (evaluation forwards are not counted).
  const std::vector<MoeLayerStats>& moe_stats() const { return moe_stats_; }
  // Milliseconds the MoE blocks spent moving tokens (model/moe.h) since the last reset.
  double moe_dispatch_ms() const { return dispatch_ms_; }
  void reset_moe_stats();
  void reset_step_tokens();

  // Logits (B·T, Vl) of the slot's last forward: this rank's vocabulary rows; columns past the
  // vocabulary are padding. Only after LossGrad::none (in_place overwrites them with their gradient).
  Tensor logits(int slot) const;

 private:
  struct Activations {
    Tensor tokens, targets;              // (B, T) i32
    std::vector<Tensor> residual;        // layers + 1 of (Nl, C): block inputs, then the last output
    std::vector<BlockActivations> blocks;
    NormActivations final_norm;          // (Nl, C)
    Tensor head_in;                      // (N, C) final norm output entered into the tp region
    Tensor logits;                       // (N, Vl) this rank's vocabulary, dlogits after a training forward
    Tensor losses;                       // (N)
    Tensor row_max;                      // (N)
    Tensor sums;                         // (2, N): exp-sums, then target logits (one reduction)
    ForwardOptions options;              // of the slot's forward, for its backward
    std::vector<BlockWeightGradInputs> deferred;  // per block, with split_backward
  };
  struct Scratch {
    BlockScratch block;
    Tensor dres_a, dres_b;               // (Nl, C) residual-stream gradients, ping-pong
    BlockActivations recomputed;         // what recomputed blocks save while they run (full), or only
                                         // the attention core's att and lse (selective)
    Tensor recomputed_out;               // (Nl, C) a full-recompute block's output, rerun in backward
  };
  void plan(Arena& arena);
  Tensor backward_pass(int slot, Tensor dout, bool defer);
  DropoutSite dropout_site(const ForwardOptions& o, int layer) const;
  // Whether block l (of the stage) saves nothing but its input (full recompute).
  bool fully_recomputed(int l) const {
    return options_.recompute == Recompute::full && (options_.recompute_layers == 0 || l < options_.recompute_layers);
  }
  // Rebuilds in backward what the forward of block l did not keep.
  void recompute(int l, Activations& a);
  // Points the parameter (or gradient) views of `unit` at p, which holds the unit's flat range.
  struct UnitViews {
    std::vector<BlockWeights>& blocks;
    Tensor &wte, &wpe, &head;
    NormWeights& final_norm;
  };
  void bind_unit(int unit, float* p, UnitViews v) const;
  // Binds a unit's parameters (or gradients); a block unit of an MoE block brings its expert unit.
  void acquire_params(int unit);
  void acquire_grads(int unit);
  void release_params(int unit);
  void release_grads(int unit);
  // Block l's expert unit (−1: a dense block), and how the MoE blocks run for options `o`.
  int expert_unit(int l) const { return moe_unit_[static_cast<size_t>(l)]; }
  MoeRuntime moe_runtime(const ForwardOptions& o);
  int block_unit(int l) const { return (range_.embedding ? 1 : 0) + l; }  // l: index within the stage
  int head_unit() const { return block_unit(range_.layers); }
  // The head reads the embedding of this stage's own unit 0 (tied, first and last stage in one).
  bool shares_embedding() const { return range_.head && range_.embedding && cfg_.tie_embeddings; }

  ModelConfig cfg_;
  int B_, T_;
  StageRange range_;
  StageOptions options_;
  TensorParallel tp_;
  LocalDims local_;
  const ParamLayout& layout_;
  std::vector<BlockParamIndex> block_index_;
  size_t wte_index_ = 0, wpe_index_ = BlockParamIndex::kAbsent, head_index_ = 0;
  size_t final_w_index_ = 0, final_b_index_ = BlockParamIndex::kAbsent;
  std::vector<FlatRange> units_;
  std::vector<int> forward_order_, backward_order_;  // the unit_params order of each pass
  UnitState& state_;
  Arena arena_;
  std::vector<Activations> acts_;
  Scratch scratch_;
  std::vector<BlockWeights> w_, g_;
  Tensor wte_, wpe_, head_, dwte_, dwpe_, dhead_;
  NormWeights final_w_, final_g_;
  Stream stream_;
  DType act_ = DType::f32;  // [Note: activation dtype]
  std::vector<float> host_losses_;  // the last stage's token losses, read back from the stream's device
  // MoE blocks: their expert state and units, the token exchange, its scratch, the step's stats.
  UnitState* experts_ = nullptr;
  std::vector<FlatRange> expert_units_;
  std::vector<int> moe_unit_;                       // per block of the stage
  std::vector<int> expert_forward_order_, expert_backward_order_;
  std::optional<ExpertDispatch> dispatch_;
  MoeScratch moe_scratch_;
  std::vector<MoeLayerStats> moe_stats_;
  double dispatch_ms_ = 0.0;
  std::optional<ContextAttention> cp_;  // cp > 1
  size_t measured_bytes_ = 0;  // StageOptions::measure_only: the arena it would allocate
};

}  // namespace megatrain
