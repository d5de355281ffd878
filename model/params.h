// The parameter table: one ParamSpec per tensor (name, global shape, how tensor parallelism splits
// it, decay group, init), and ParamLayout, which derives a tensor-parallel rank's local view of
// every tensor from the specs and lays the local tensors out back to back in one flat buffer
// (offsets 64-byte aligned). Parameters, gradients and optimizer state all share this layout, so a
// gradient bucket or a ZeRO shard is an (offset, size) range.
//
// [Note: tp slices] A tensor split by rows is a list of parts along dimension 0 — one for most
// tensors, [Q | K | V] and [gate | up] for the fused ones — and each part is split over tp on its
// own, so rank r's local tensor is [Q_r | K_r | V_r]: its own heads. A part may have fewer shards
// than tp (key/value heads when n_kv_heads < tp): then rank r holds shard r / (tp / shards), the
// same rows as its tp / shards neighbours. A tensor split by columns gives rank r columns
// [r·c/tp, (r+1)·c/tp). Every element keeps its global index, so initial values — a pure function of
// (seed, parameter, global index) — do not depend on the layout.
#pragma once
#include <string>
#include <vector>

#include "kernels/flat_buffer.h"
#include "kernels/tensor.h"
#include "model/config.h"
#include "model/unit_state.h"

namespace megatrain {

// `state`: a value training sets by a rule of its own, not by gradients (the aux-free router
// bias of model/moe.h): the optimizer leaves it alone.
enum class ParamGroup { embedding, norm, bias, matrix, state };
enum class InitKind { normal, normal_residual, ones, zeros };
enum class TpSplit { replicated, rows, cols };

// A part of a row-split tensor: `rows` global rows split into `shards` equal shards (shards
// divides tp).
struct RowPart {
  int64_t rows = 0;
  int shards = 1;
};

struct ParamSpec {
  std::string name;     // e.g. "layers.3.attn.qkv.weight"
  Shape shape;          // global shape
  TpSplit split = TpSplit::replicated;
  std::vector<RowPart> parts = {};  // TpSplit::rows: the parts, rows summing to shape[0]
  ParamGroup group = ParamGroup::matrix;
  InitKind init = InitKind::normal;
  int valid_rows = -1;  // rows beyond this are padding and initialised to zero (padded vocab); −1 = all
  // The rows this rank shares with other tp ranks (a part with fewer shards than tp, or the whole
  // of a replicated tensor) receive only a partial gradient on each of them, to be summed over the
  // sharers: key/value heads replicated under GQA, norm weights under sequence parallelism.
  bool partial_grad = false;
  // The random stream of the initial values: the tensor's index in the whole model, so a stage
  // holding only some tensors draws the same values; −1 = its index in the layout.
  int init_stream = -1;
  // A copy of a tensor another pipeline stage owns (the embedding a tied head reads on the last
  // stage): kept equal to the owner's by summing their gradients; checkpoints store the owner's.
  bool tied_copy = false;
  // An expert tensor (E, rows, cols): dimension 0 indexes the experts, split over expert-parallel
  // ranks (rank r holds experts [r·E/ep, (r+1)·E/ep)); `split` and `parts` then apply to each
  // expert's (rows, cols) matrix as they would to a 2-D tensor. Never shared between tp ranks.
  bool expert = false;
};

// A rank's place in its tensor-parallel group, and in its expert-parallel group.
struct TpCoord {
  int rank = 0, size = 1;
};
struct EpCoord {
  int rank = 0, size = 1;
};

// A flat range of the local layout whose values this rank shares with `sharers` tp ranks
// (consecutive, starting at a multiple of `sharers`), and whether its gradient there is partial.
struct SharedRange {
  FlatRange range;
  int sharers = 1;
  bool partial_grad = false;
};

class ParamLayout {
 public:
  ParamLayout() = default;
  ParamLayout(std::vector<ParamSpec> specs, TpCoord tp, EpCoord ep = {});

  size_t size() const { return specs_.size(); }
  const ParamSpec& spec(size_t i) const { return specs_[i]; }
  const Shape& local_shape(size_t i) const { return local_[i]; }
  TpCoord tp() const { return tp_; }
  EpCoord ep() const { return ep_; }
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t total() const { return total_; }  // local floats, including alignment padding
  int64_t num_parameters() const;           // global: sum of numel, no padding
  size_t index_of(const std::string& name) const;
  bool contains(const std::string& name) const;
  // Global element index (row-major in the global shape) of local element e of tensor i.
  int64_t global_index(size_t i, int64_t e) const;
  // The pieces of the local layout shared with other tp ranks, in flat order.
  const std::vector<SharedRange>& shared() const { return shared_; }
  // The pieces of [0, total()) whose values this rank is the one to count (in a gradient norm) and
  // store (in a checkpoint), in flat order: everything but the values it shares with lower tp ranks
  // (the lowest sharer stands for them) and tied copies (their owner stage does).
  const std::vector<FlatRange>& owned() const { return owned_; }
  Tensor view(float* base, size_t i) const { return Tensor(base + offsets_[i], local_[i]); }
  // Tensor i's local view in a buffer holding only the flat range starting at `data_begin`
  // (data[j] is flat element data_begin + j); the tensor must lie inside that buffer, in the memory
  // of `device`.
  Tensor view_in(float* data, int64_t data_begin, size_t i, Device device = Device::cpu) const {
    return Tensor(data + (offsets_[i] - data_begin), local_[i]).on(device);
  }

 private:
  Shape expert_local_shape(const ParamSpec& s) const;

  std::vector<ParamSpec> specs_;
  std::vector<Shape> local_;
  std::vector<int64_t> offsets_;
  std::vector<SharedRange> shared_;
  std::vector<FlatRange> owned_;
  TpCoord tp_;
  EpCoord ep_;
  int64_t total_ = 0;
};

// What rank `tp` holds of the model's tensor-parallel dimensions.
struct LocalDims {
  int heads = 0, kv_heads = 0;  // attention heads and key/value heads
  int ffn = 0;                  // hidden units of the MLP
  int vocab = 0;                // vocabulary rows (padded_vocab(tp) / tp)
  int vocab_begin = 0;          // the first of them
  int vocab_valid = 0;          // how many of them are real words (the rest padding)
};
LocalDims local_dims(const ModelConfig& cfg, TpCoord tp);

// Which part of the model a pipeline stage holds: blocks [first_layer, first_layer + layers), the
// embedding on the first stage, the final norm and head on the last.
struct StageRange {
  int first_layer = 0, layers = 0;
  bool embedding = true, head = true;
};
inline StageRange whole_model(const ModelConfig& cfg) { return {0, cfg.n_layers, true, true}; }

// The parameters of the GPT decoder described by `cfg` that a pipeline rank holds — the model
// chunks `chunks` (one, or several for an interleaved pipeline; in model order, not overlapping) —
// in model order, as rank `tp` holds them; `sequence_parallel` marks norm weights as having
// partial gradients. A tied head on a rank without the embedding gets a copy of it (tied_copy)
// after the final norm. [Note: expert tensors] The expert tensors of MoE blocks (those of rank
// `ep`'s experts) come after all the others, in layer order: flat range [dense_end, total()) holds
// them, so the dense and the expert parameters are two back-to-back ranges reduced over different
// data-parallel groups (model/moe.h).
ParamLayout gpt_param_layout(const ModelConfig& cfg, TpCoord tp, bool sequence_parallel,
                             const std::vector<StageRange>& chunks, EpCoord ep = {});
inline ParamLayout gpt_param_layout(const ModelConfig& cfg, TpCoord tp, bool sequence_parallel, const StageRange& range,
                                    EpCoord ep = {}) {
  return gpt_param_layout(cfg, tp, sequence_parallel, std::vector<StageRange>{range}, ep);
}
inline ParamLayout gpt_param_layout(const ModelConfig& cfg, TpCoord tp, bool sequence_parallel) {
  return gpt_param_layout(cfg, tp, sequence_parallel, whole_model(cfg));
}
// The whole, unsplit model (tp = 1): the global tensors checkpoints and Hugging Face files hold.
inline ParamLayout gpt_param_layout(const ModelConfig& cfg) { return gpt_param_layout(cfg, TpCoord{}, false); }

// The units (model/unit_state.h) of chunk `range` of a layout: the embeddings (first stage), one
// per block, then the final norm and the untied head (last stage), back to back up to the next
// chunk's first tensor (or the end).
std::vector<FlatRange> gpt_param_units(const ParamLayout& layout, const StageRange& range);
// Every chunk's units, in order: they cover [0, dense_end(layout)) back to back.
std::vector<FlatRange> gpt_param_units(const ParamLayout& layout, const std::vector<StageRange>& chunks);
// Where the expert tensors start ([Note: expert tensors]): total() for a dense model.
int64_t dense_end(const ParamLayout& layout);
// One unit per MoE block of the chunks, in layer order, holding its expert tensors: they cover
// [dense_end(layout), total()) back to back. Empty for a dense model.
std::vector<FlatRange> moe_expert_units(const ParamLayout& layout, const std::vector<StageRange>& chunks);

// Deterministic initialisation: global element g of parameter p is rng_normal(seed, init, p, g) · std
// (std / √(2·n_layers) for residual projections, GPT-2), ones for norm weights, zeros for biases
// and vocabulary padding — the same values on every layout.
void init_params(const ParamLayout& layout, float* params, const ModelConfig& cfg, uint64_t seed);
// The same values for the flat range `range` only, into data (data[j] = flat element range.begin + j);
// alignment padding inside the range is left untouched.
void init_params_range(const ParamLayout& layout, float* data, FlatRange range, const ModelConfig& cfg, uint64_t seed);

}  // namespace megatrain
