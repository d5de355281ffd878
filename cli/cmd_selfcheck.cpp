// `megatrain selfcheck [--checkpoint-dir DIR] [--run-dir DIR] [--config X --profile-out FILE]`: the
// pre-start health check (health/selfcheck.h) on the MPI world, as the resilient driver runs it
// before every launch. Prints one line per check on rank 0, writes RUN_DIR/reports/selfcheck.json
// and, when a check fails, RUN_DIR/reports/exclude.txt (the failing hosts, one per line, for the
// scheduler's --exclude). With --profile-out, a machine that passes is then measured for the
// planner (planner/plan_profile.h, X's model) and the profile written to FILE, as `plan --measure`
// does. Exit code 0 when every check passes, 75 otherwise.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "config/config.h"
#include "health/exit_codes.h"
#include "health/flight_dump.h"
#include "health/selfcheck.h"
#include "planner/plan_profile.h"

namespace megatrain {
namespace {

// Rank 0: one line per check, the verdict, and the reports under RUN_DIR/reports.
void report(const SelfCheckReport& rep, const std::string& run_dir) {
  for (const SelfCheckResult& c : rep.checks)
    fmt::print("selfcheck {:<10} {} {:6.3f} s  {}\n", c.name, c.pass ? "pass" : "FAIL", c.seconds, c.detail);
  fmt::print("selfcheck {} in {:.2f} s{}\n", rep.pass() ? "passed" : "FAILED", rep.seconds,
             rep.pass() ? ""
                        : fmt::format(": ranks [{}] on hosts [{}]", fmt::join(rep.failing_ranks, ","),
                                      fmt::join(rep.failing_hosts, ",")));
  if (run_dir.empty()) return;
  const std::filesystem::path dir = std::filesystem::path(run_dir) / "reports";
  write_file_atomic((dir / "selfcheck.json").string(), rep.json());
  if (!rep.pass()) write_file_atomic((dir / "exclude.txt").string(), fmt::format("{}\n", fmt::join(rep.failing_hosts, "\n")));
}

void measure_profile(const Comm& world, const Config& config, const std::string& out) {
  const DeviceProfile d = measure_cpu_profile(config, world);
  if (world.rank() != 0) return;
  MT_INPUT_CHECK(write_file_atomic(out, profile_to_toml(d)),
                 "selfcheck --profile-out {}: cannot write the file; name one in an existing, writable folder", out);
  fmt::print("selfcheck profile    written to {} (megatrain plan --gpu cpu --profile {})\n", out, out);
}

}  // namespace

Command add_selfcheck_command(CLI::App& root) {
  struct Options {
    SelfCheckOptions check;
    std::string run_dir, config, profile_out;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("selfcheck", "Check every rank, link and the checkpoint storage before a start");
  app->add_option("--checkpoint-dir", opts->check.storage_dir, "Probe this folder's storage (write, fsync, read back)");
  app->add_option("--run-dir", opts->run_dir, "Write reports/selfcheck.json and reports/exclude.txt here");
  app->add_option("--min-free-mb", opts->check.min_free_mb, "Fail a host with less available memory")
      ->capture_default_str();
  app->add_option("--config", opts->config, "The model --profile-out measures a training step of");
  app->add_option("--profile-out", opts->profile_out,
                  "After passing, measure the planner's CPU profile here (megatrain plan --gpu cpu --profile FILE)");
  return Command{app,
                 [opts] {
                   MT_INPUT_CHECK(opts->profile_out.empty() || !opts->config.empty(),
                                  "selfcheck --profile-out {} measures a training step of a model: name its config "
                                  "with --config X.toml",
                                  opts->profile_out);
                   // Read before the checks, so a bad config fails at once.
                   const std::optional<Config> config =
                       opts->profile_out.empty() ? std::nullopt : std::optional(load_config(opts->config, {}));
                   const Comm world = Comm::world();
                   const SelfCheckReport rep = run_selfcheck(world, opts->check);
                   if (world.rank() == 0) report(rep, opts->run_dir);
                   if (!rep.pass()) return kExitHang;
                   if (!opts->profile_out.empty()) measure_profile(world, *config, opts->profile_out);
                   return 0;
                 },
                 /*uses_mpi=*/true};
}

}  // namespace megatrain
