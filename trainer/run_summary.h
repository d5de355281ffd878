// The lines rank 0 logs before the first step: the model and data, the precision, the device's
// GEMM and attention paths, and the layout (micro-batches, tp, pp, dp, ZeRO, buckets).
#pragma once
#include "trainer/rank_run.h"
#include "trainer/run_state.h"

namespace megatrain {

void log_run_summary(const Config& cfg, RankRun& run, const RunState& at);

}  // namespace megatrain
