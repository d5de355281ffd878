// The planner's memory per rank (`megatrain plan`): what a run at a layout accounts in its metrics'
// memory_bytes, predicted without MPI and without allocating the model. It reuses the trainer's own
// sizing — the parameter layout and units (model/params.h), each optimizer group's ZeRO plan
// (optim/zero_plan.h: the buffers the run allocates from it, and its working buffers from one replay
// of the backward's unit order) and AdamW's moments, the pipeline schedule's micro-batches in flight
// (parallel/pipeline.h) and each stage's activation plan (model/stage_plan.h: plan_stage, what
// Stage allocates) — so the prediction is RankRun::memory() by construction, not a
// formula beside it. GEMM scratch (16-bit operand copies) and the process's RSS are not predicted.
#pragma once
#include <cstdint>
#include <vector>

#include "config/config.h"
#include "trainer/metrics.h"

namespace megatrain {

struct PlannedMemory {
  MemoryMetrics bytes;  // gemm_scratch and peak_rss stay 0
  int pp_rank = 0;      // the pipeline rank it is for
  int64_t total() const {
    return bytes.params + bytes.master_params + bytes.grads + bytes.optimizer + bytes.activations + bytes.comm_buffers;
  }
};

// Pipeline rank `pp_rank` of a resolved config (resolve_config): every tp, dp and ep rank of it
// holds the same, up to the padding of ZeRO shards (the last data-parallel ranks hold fewer real
// values in buffers of the same size).
PlannedMemory plan_memory(const Config& c, int pp_rank);
// The pipeline rank that holds the most (stages differ: embedding, head, micro-batches in flight).
PlannedMemory plan_memory(const Config& c);
// The pipeline ranks that may hold the most: all of them when parallel.pipeline_layers splits the
// blocks unevenly, else the first and the last, since every schedule keeps no more micro-batches in
// flight on a later stage than on the first, and a middle stage holds the first's blocks without
// its embedding.
std::vector<int> heaviest_pp_candidates(const Config& c);

}  // namespace megatrain
