// `megatrain train --config FILE [--set section.key=value]... [--default section.key=value]...`
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "config/config.h"
#include "config/config_agreement.h"
#include "health/startup_times.h"
#include "parallel/comm.h"
#include "parallel/launch_env.h"
#include "trainer/stop_request.h"
#include "trainer/train.h"

namespace megatrain {

Command add_train_command(CLI::App& root) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    std::vector<std::string> defaults;
    TrainOptions train;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("train", "Train a model described by a TOML config");
  app->add_option("--config", opts->config, "TOML config file")->required();
  app->add_option("--set", opts->overrides, "Override a config key: --set train.steps=20 (repeatable)");
  app->add_option("--default", opts->defaults,
                  "Set a config key that neither the file nor --set sets: --default checkpoint.memory_interval=1 "
                  "(repeatable; the resilient driver's)");
  app->add_flag("--allow-fresh-start", opts->train.allow_fresh_start,
                "With checkpoint.load = \"latest\": start fresh when no valid checkpoint exists");
  return {app, [opts] {
            const Comm world = Comm::world();
            // Placement, from MPI (rank, size) and the launcher's environment (local rank, size):
            // rank 0's line at info, every rank's at debug (ranks > 0 log warnings only).
            const std::string placement = fmt::format("rank {} of {}, local rank {} of {} on host {}", world.rank(),
                                                      world.size(), local_rank_from_env(), local_size_from_env(),
                                                      host_name());
            if (world.rank() == 0) spdlog::info("{}", placement);
            else spdlog::debug("{}", placement);
            Config cfg = load_config(opts->config, opts->overrides, opts->defaults);
            resolve_config(cfg, world.size());
            agree_on_config(cfg, world);
            StartupTimes::instance().mark("config");
            if (world.rank() == 0) fmt::print("# resolved config\n{}\n", config_to_toml(cfg));
            if (run_training(cfg, world, opts->train).stopped_at > 0) return kExitStopped;
            // The resilient driver takes exit 0 as "finished" only with this line: a launcher that
            // started no rank (srun's "task launch failed") may end 0 as well.
            if (world.rank() == 0) spdlog::info("TRAIN_FINISHED steps={}", cfg.train.steps);
            return 0;
          },
          /*uses_mpi=*/true};
}

}  // namespace megatrain
