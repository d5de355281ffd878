// `megatrain trace merge RUN_DIR` (docs/robustness.md R15): joins the ranks' timelines
// (RUN_DIR/timeline/rank_R.trace.json, health/timeline.h) into RUN_DIR/timeline/merged.trace.json —
// one process per rank, a lane per process group, ready for chrome://tracing or ui.perfetto.dev —
// and writes RUN_DIR/timeline/heatmap.tsv: per rank, the median step, compute and wait times in ms
// (MegaScale's heat map; the straggler is the row with the long compute and the short wait).
#pragma once
#include <string>

namespace megatrain {

struct TraceMergeResult {
  int ranks = 0;
  long long events = 0;
  std::string merged, heatmap;  // the files written
};

// A missing folder, no rank files or a damaged one is a DataError naming the file.
TraceMergeResult merge_traces(const std::string& run_dir);

}  // namespace megatrain
