#include "model/stage_plan.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

namespace megatrain {
namespace {

// Records what `place` allocated in `arena` as one plan item.
void item(Arena& arena, StagePlan* plan, const std::function<std::string()>& what, const std::function<void()>& place) {
  const size_t before = arena.used();
  place();
  if (plan) plan->items.push_back({what(), arena.used() - before});
}

}  // namespace

StageSpec stage_spec(const ModelConfig& cfg, int B, int T, StageRange range, const StageOptions& options,
                     const TpShape& tp, int ep, const CpSplit& split, CpComm algorithm) {
  MT_CHECK(T <= cfg.max_seq_len, "seq_len {} > max_seq_len {}", T, cfg.max_seq_len);
  MT_CHECK(options.slots >= 1, "a stage needs at least one micro-batch slot, got {}", options.slots);
  MT_CHECK(options.recompute == Recompute::none || !options.split_backward,
           "a split backward reads in its weight step the activations its input step used; recompute would "
           "have to rebuild them twice");
  MT_CHECK(options.recompute_layers >= 0, "recompute_layers = {} < 0", options.recompute_layers);
  StageSpec s;
  s.cfg = cfg, s.B = B, s.T = T, s.range = range, s.options = options, s.tp = tp, s.ep = ep;
  const LocalDims L = local_of(cfg, tp);
  s.attention = attention_spec(split, algorithm, B, T, AttnHeads{L.heads, L.kv_heads, cfg.head_dim()});
  for (int l = 0; l < range.layers; ++l) s.moe.push_back(cfg.moe.is_moe_layer(range.first_layer + l));
  s.act = activation_dtype(options.matmul, options.device, split.cp, options.bf16_activations).dtype;
  return s;
}

StageBuffers allocate_stage(Arena& arena, const StageSpec& spec, StagePlan* plan) {
  const ModelConfig& cfg = spec.cfg;
  const int B = spec.B, T = spec.T;
  const int64_t N = int64_t{B} * T, Nl = spec.tp.local_rows(), C = cfg.d_model;
  const DType act = spec.act;
  const auto kinds = [&](int l) {
    return BlockKinds{!spec.moe[static_cast<size_t>(l)], spec.moe[static_cast<size_t>(l)], spec.ep};
  };
  const bool any_moe = std::find(spec.moe.begin(), spec.moe.end(), true) != spec.moe.end();
  const bool any_dense = std::find(spec.moe.begin(), spec.moe.end(), false) != spec.moe.end();
  StageBuffers out;
  StageScratch& sc = out.scratch;
  if (spec.options.recompute == Recompute::full) {
    item(
        arena, plan, [] { return std::string("full recompute: one block's activations, rebuilt in backward"); },
        [&] {
          sc.recomputed =
              block_activations(arena, cfg, spec.tp, B, T, nullptr, BlockKinds{any_dense, any_moe, spec.ep}, act);
          sc.recomputed_out = arena.tensor(Shape{Nl, C});
        });
  } else if (spec.options.recompute == Recompute::selective) {
    item(
        arena, plan, [] { return std::string("selective recompute: one attention core's output and lse"); },
        [&] {
          Arena shapes_only = Arena::measuring();
          const AttentionActivations like = attention_activations(shapes_only, cfg, spec.tp, B, T);
          sc.recomputed.attn.att = arena.tensor(like.att.shape, act);
          sc.recomputed.attn.lse = arena.tensor(like.lse.shape);
        });
  }
  const AttentionActivations* shared_core =
      spec.options.recompute == Recompute::selective ? &sc.recomputed.attn : nullptr;
  out.slots.resize(static_cast<size_t>(spec.options.slots));
  for (size_t k = 0; k < out.slots.size(); ++k) {
    SlotActivations& a = out.slots[k];
    item(
        arena, plan,
        [&] { return fmt::format("slot {}: tokens, targets and the {} block inputs", k, spec.range.layers + 1); },
        [&] {
          a.tokens = arena.tensor_i32(Shape{B, T});
          a.targets = arena.tensor_i32(Shape{B, T});
          for (int l = 0; l <= spec.range.layers; ++l) a.residual.push_back(arena.tensor(Shape{Nl, C}));
        });
    for (int l = 0; l < spec.range.layers; ++l) {
      if (spec.fully_recomputed(l)) {
        a.blocks.push_back(sc.recomputed);
        continue;
      }
      item(
          arena, plan,
          [&] { return fmt::format("slot {}: layer {} saved for backward", k, spec.range.first_layer + l); },
          [&] { a.blocks.push_back(block_activations(arena, cfg, spec.tp, B, T, shared_core, kinds(l), act)); });
    }
    if (spec.options.split_backward)
      item(
          arena, plan, [&] { return fmt::format("slot {}: output gradients kept for the split backward", k); },
          [&] {
            for (int l = 0; l < spec.range.layers; ++l)
              a.deferred.push_back(block_weight_grad_inputs(arena, cfg, spec.tp, B, T, act));
          });
    if (!spec.range.head) continue;
    item(
        arena, plan, [&] { return fmt::format("slot {}: final norm, logits and the loss's rows", k); },
        [&] {
          a.final_norm = norm_activations(arena, cfg, Nl, act);
          a.head_in = spec.tp.sequence_parallel() ? arena.tensor(Shape{N, C}, act) : a.final_norm.out;
          a.logits = arena.tensor(Shape{N, local_of(cfg, spec.tp).vocab});
          a.losses = arena.tensor(Shape{N});
          a.row_max = arena.tensor(Shape{N});
          a.sums = arena.tensor(Shape{2, N});
        });
  }
  item(
      arena, plan, [] { return std::string("scratch shared by the blocks"); },
      [&] { sc.block = block_scratch(arena, cfg, spec.tp, B, T, act); });
  item(
      arena, plan, [] { return std::string("the attention part's buffers"); },
      [&] { sc.attention = plan_attention(arena, spec.attention); });
  if (any_moe)
    item(
        arena, plan, [] { return std::string("MoE token exchange"); },
        [&] { sc.moe = moe_scratch(arena, cfg, spec.tp, spec.ep, N); });
  item(
      arena, plan, [] { return std::string("residual-stream gradients"); },
      [&] {
        sc.dres_a = arena.tensor(Shape{Nl, C});
        sc.dres_b = arena.tensor(Shape{Nl, C});
      });
  return out;
}

StagePlan plan_stage(const StageSpec& spec) {
  StagePlan plan;
  Arena measure = Arena::measuring();
  allocate_stage(measure, spec, &plan);
  plan.bytes = Arena::aligned(measure.used());
  return plan;
}

}  // namespace megatrain
