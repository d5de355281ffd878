// Pipeline schedules as data (docs/architecture.md §Schedules as data): each generator returns the list of steps one
// pipeline stage runs — forward, backward or weight-gradient step of (micro-batch, model chunk) —
// and one executor runs any list. With `chunks` model chunks per rank (interleaved pipelines), chunk c of stage s is
// virtual stage c·stages + s, so a micro-batch visits stage 0 … stages − 1 once per chunk.
//
// A step runs when its inputs exist: forward (m, c) on virtual stage v needs forward (m) on v − 1;
// backward (m) on v needs backward (m) on v + 1 (the last virtual stage: its own forward, which
// computes the loss). Zero-bubble schedules split the backward (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024): `backward` is then only the input gradient (B), which the previous stage
// waits for, and a later `weight` step (W) computes the weight gradients from what B kept; a
// micro-batch's activations are freed by its W. Without a weight step, backward is B and W at once. simulate() plays all stages' lists under those rules with given step costs
// and reports the makespan, the idle share ("bubble") and each stage's peak number of micro-batches
// whose activations are held (forward done, backward not yet): the memory a schedule needs.
#pragma once
#include <string>
#include <vector>

namespace megatrain {

enum class PipeOp { forward, backward, weight };

struct PipeStep {
  PipeOp op = PipeOp::forward;
  int micro = 0;  // micro-batch of the step
  int chunk = 0;  // model chunk on this rank
  bool operator==(const PipeStep&) const = default;
};

struct PipeShape {
  int stages = 1;
  int micro_batches = 1;
  int chunks = 1;  // model chunks per rank (> 1: interleaved)
};

// GPipe: every forward, then every backward (all micro-batches held at once).
std::vector<PipeStep> schedule_gpipe(int stage, const PipeShape& shape);
// 1F1B (PipeDream-Flush, Megatron's default): stages − stage − 1 warm-up forwards, then one
// forward and one backward in turn, then the remaining backwards; at most stages − stage held.
std::vector<PipeStep> schedule_1f1b(int stage, const PipeShape& shape);
// Interleaved 1F1B (Megatron's virtual pipeline): the micro-batches go through the chunks in
// groups of `stages`, so micro_batches must be a multiple of stages when chunks > 1; the bubble
// shrinks about chunks-fold. chunks = 1 is 1F1B.
std::vector<PipeStep> schedule_interleaved(int stage, const PipeShape& shape);
// Zero-bubble ZB-H1: 1F1B's memory (at most stages − stage micro-batches held, counted until their
// W), with the weight-gradient steps deferred into what would be 1F1B's idle time. The lists are
// made by playing all stages with unit costs and taking, whenever a stage is free, a ready backward
// first, then the next forward if the memory limit allows, then the oldest pending W.
std::vector<PipeStep> schedule_zero_bubble(int stage, const PipeShape& shape);

// Why a shape cannot be scheduled by `name` ("gpipe", "1f1b", "interleaved", "zero_bubble"), or ""
// when it can.
std::string schedule_problem(const std::string& name, const PipeShape& shape);
// The named schedule's list for `stage`; throws Error on an unknown name or a bad shape.
std::vector<PipeStep> pipeline_schedule(const std::string& name, int stage, const PipeShape& shape);

// Whether the list splits micro-batch backwards into B and W steps (holds weight steps).
bool splits_backward(const std::vector<PipeStep>& steps);

struct StepCosts {
  double forward = 1.0;
  double input_grad = 1.0;   // B; a backward without its own W step costs input_grad + weight_grad
  double weight_grad = 1.0;  // W
};
struct ScheduleStats {
  double makespan = 0;           // time until the last step ends
  double bubble = 0;             // idle share of stages × makespan
  std::vector<double> idle;      // per stage: idle time before its last step ends
  std::vector<double> busy;      // per stage: time spent running steps
  std::vector<int> peak_held;    // per stage: most micro-batch activations held at once (all chunks)
};
// Plays `lists` (one per stage) with the given step costs. Throws Error naming the stage and step
// when the lists deadlock, or when a list misses or repeats a step, or runs a W before its B, or
// takes a neighbour's messages in another order than the neighbour sends them (the executor's
// links are first-in first-out, parallel/pipeline_links.h).
ScheduleStats simulate(const std::vector<std::vector<PipeStep>>& lists, const PipeShape& shape,
                       const StepCosts& costs = {});

}  // namespace megatrain
