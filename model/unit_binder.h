// How a stage reaches its parameters and gradients (model/unit_state.h): per unit — the embedding,
// each block, the final norm and head — through the dense UnitState, and for an MoE block also its
// expert unit through the experts' UnitState, bound and handed back together. The binder keeps the
// tensor views (StageWeights) pointed at what the states provide while a unit is in use, and the
// order each pass asks for the units in.
//
// [Note: unit order] forward reads the units in order; the tied head reads the embedding again at
// the end, so the embedding stays acquired through the forward pass. Backward reads the head unit
// (and the tied embedding) first, then the blocks in reverse; the embedding's backward is a
// scatter-add that reads no weights, so an untied embedding is not asked for in backward.
#pragma once
#include <vector>

#include "model/block.h"
#include "model/embedding.h"
#include "model/unit_state.h"

namespace megatrain {

// Views of a stage's tensors (parameters, or their gradients).
struct StageWeights {
  std::vector<BlockWeights> blocks;
  Tensor wte, wpe, head;  // head = wte when tied within the stage
  NormWeights final_norm;
};

class UnitBinder {
 public:
  // `state` provides the units of gpt_param_units(layout, range); `experts` those of
  // moe_expert_units(layout, {range}) (needed when the range has MoE blocks).
  UnitBinder(const ModelConfig& cfg, const ParamLayout& layout, StageRange range, UnitState& state, UnitState* experts,
             Device device);

  const std::vector<FlatRange>& units() const { return units_; }
  bool has_experts() const { return !expert_units_.empty(); }
  int block_unit(int l) const { return (range_.embedding ? 1 : 0) + l; }  // l: index within the stage
  int head_unit() const { return block_unit(range_.layers); }
  int embedding_unit() const { return 0; }
  // The head reads the embedding of this stage's own unit 0 (tied, first and last stage in one).
  bool shares_embedding() const { return shares_embedding_; }

  void begin_forward();
  void begin_backward();
  // Binds a unit's parameters (or gradients); a block unit of an MoE block brings its expert unit.
  void acquire_params(int unit) { bind(unit, false); }
  void acquire_grads(int unit) { bind(unit, true); }
  void release_params(int unit);
  void release_grads(int unit);
  const StageWeights& params() const { return w_; }
  const StageWeights& grads() const { return g_; }

 private:
  void bind(int unit, bool grads);
  // Block l's expert unit (−1: a dense block).
  int expert_unit(int unit) const;

  const ParamLayout& layout_;
  StageRange range_;
  Device device_;
  bool shares_embedding_;
  UnitState& state_;
  UnitState* experts_;
  std::vector<FlatRange> units_, expert_units_;
  std::vector<BlockParamIndex> block_index_;
  size_t wte_index_ = 0, wpe_index_ = BlockParamIndex::kAbsent, head_index_ = 0;
  size_t final_w_index_ = 0, final_b_index_ = BlockParamIndex::kAbsent;
  std::vector<int> moe_unit_;  // per block of the stage
  std::vector<int> forward_order_, backward_order_, expert_forward_order_, expert_backward_order_;
  StageWeights w_, g_;
};

}  // namespace megatrain
