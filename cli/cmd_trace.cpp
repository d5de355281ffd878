// `megatrain trace merge RUN_DIR`: one timeline of every rank (health/trace_merge.h).
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "health/trace_merge.h"

namespace megatrain {

Command add_trace_command(CLI::App& root) {
  auto run_dir = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand("trace", "Work with the per-rank timelines of a run (health.timeline)");
  app->require_subcommand(1);
  CLI::App* merge = app->add_subcommand("merge", "Join the ranks' timelines into one trace and a heat map");
  merge->add_option("RUN_DIR", *run_dir, "health.run_dir of the run")->required();
  return Command{app, [run_dir] {
                   const TraceMergeResult r = merge_traces(*run_dir);
                   fmt::print("{} ranks, {} events: {} (open it in chrome://tracing or ui.perfetto.dev); {}\n", r.ranks,
                              r.events, r.merged, r.heatmap);
                   return 0;
                 }};
}

}  // namespace megatrain
