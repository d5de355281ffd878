// `megatrain config`: loads a config with its --set overrides, applies every rule for a given world
// size and prints the resolved config as TOML — the dry run of what `train` would use.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "config/config.h"

namespace megatrain {

Command add_config_command(CLI::App& root) {
  struct Options {
    std::string path;
    std::vector<std::string> overrides;
    int world_size = 1;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("config", "Check a config file and print it resolved, as TOML");
  app->add_option("--config", opts->path, "TOML config file")->required();
  app->add_option("--set", opts->overrides, "Override one key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  app->add_option("--world-size", opts->world_size, "Number of ranks to resolve the layout for")->capture_default_str();
  return Command{app, [opts] {
                   Config cfg = load_config(opts->path, opts->overrides);
                   resolve_config(cfg, opts->world_size);
                   fmt::print("{}", config_to_toml(cfg));
                   return 0;
                 }};
}

}  // namespace megatrain
