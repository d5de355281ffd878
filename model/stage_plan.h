// A stage's activation plan (docs/architecture.md §Stages): every buffer one pipeline stage keeps
// per micro-batch slot and reuses across blocks, as a pure function of shapes — no communicator, no
// parameters. Stage allocates exactly this (allocate_stage on its arena), and the planner
// (planner/plan_memory.h) sums plan_stage(…).bytes for a layout it has never run, so the prediction
// is the run's by construction.
#pragma once
#include <string>
#include <vector>

#include "model/attention_parts.h"
#include "model/block.h"
#include "model/config.h"
#include "model/params.h"
#include "model/recompute.h"

namespace megatrain {

// What a stage is built for, beside its parameters.
struct StageOptions {
  int slots = 1;                // micro-batches in flight: forward(slot, …) fills a slot, backward consumes it
  bool split_backward = false;  // keep what backward_input() leaves to backward_weights()
  Recompute recompute = Recompute::none;
  int recompute_layers = 0;            // full recompute: blocks covered, from the stage's first; 0: all
  Precision matmul = Precision::fp32;  // what the linear layers multiply (kernels/device.h)
  // Where the stage computes: its activations live in that device's memory, and the UnitState's
  // parameters and gradients must too (tokens and targets come from the host).
  Device device = Device::cpu;
  bool bf16_activations = true;  // [Note: activation dtype] in model/attention_parts.h
};

// Everything the plan depends on. T: the rows of a sequence the stage holds (with context
// parallelism attention.split.local_len()).
struct StageSpec {
  ModelConfig cfg;
  int B = 1, T = 1;
  StageRange range;
  StageOptions options;
  TpShape tp{1, 1};
  int ep = 1;
  std::vector<bool> moe;  // per block of the stage: an MoE block (cfg.moe.is_moe_layer)
  AttentionSpec attention;
  DType act = DType::f32;  // activation_dtype(…)

  // Whether block l (of the stage) saves nothing but its input (full recompute).
  bool fully_recomputed(int l) const {
    return options.recompute == Recompute::full && (options.recompute_layers == 0 || l < options.recompute_layers);
  }
};
// B sequences of T rows; `split`: the cp group's split of each sequence (split.cp = 1: none); `tp`
// and `ep` this rank's tensor- and expert-parallel shape.
StageSpec stage_spec(const ModelConfig& cfg, int B, int T, StageRange range, const StageOptions& options,
                     const TpShape& tp, int ep, const CpSplit& split, CpComm algorithm);

// One micro-batch slot's saved activations.
struct SlotActivations {
  Tensor tokens, targets;        // (B, T) i32
  std::vector<Tensor> residual;  // layers + 1 of (Nl, C): block inputs, then the last output
  std::vector<BlockActivations> blocks;
  NormActivations final_norm;                   // (Nl, C)
  Tensor head_in;                               // (N, C) final norm output entered into the tp region
  Tensor logits;                                // (N, Vl) this rank's vocabulary, dlogits after a training forward
  Tensor losses;                                // (N)
  Tensor row_max;                               // (N)
  Tensor sums;                                  // (2, N): exp-sums, then target logits (one reduction)
  std::vector<BlockWeightGradInputs> deferred;  // per block, with split_backward
};
// Buffers reused by every block and slot (not saved).
struct StageScratch {
  BlockScratch block;
  Tensor dres_a, dres_b;        // (Nl, C) residual-stream gradients, ping-pong
  BlockActivations recomputed;  // what recomputed blocks save while they run (full), or only the
                                // attention core's att and lse (selective)
  Tensor recomputed_out;        // (Nl, C) a full-recompute block's output, rerun in backward
  MoeScratch moe;               // a stage with MoE blocks
  AttentionBuffers attention;   // the attention part's (model/attention_parts.h)
};
struct StageBuffers {
  std::vector<SlotActivations> slots;
  StageScratch scratch;
};

// One line of the plan: what a group of buffers is for, and its bytes.
struct StagePlanItem {
  std::string what;
  size_t bytes = 0;
};
struct StagePlan {
  size_t bytes = 0;                  // the arena a stage allocates (64-byte aligned)
  std::vector<StagePlanItem> items;  // in allocation order; their bytes add up to `bytes`'s used part
};

// Places every buffer of `spec` in `arena` (a measuring one sizes them); `plan`, when given, gets
// an item per group.
StageBuffers allocate_stage(Arena& arena, const StageSpec& spec, StagePlan* plan = nullptr);
StagePlan plan_stage(const StageSpec& spec);

}  // namespace megatrain
