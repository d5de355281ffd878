// `megatrain selfcheck [--checkpoint-dir DIR] [--run-dir DIR]`: the pre-start health check
// (health/selfcheck.h) on the MPI world, as the resilient driver runs it before every launch.
// Prints one line per check on rank 0, writes RUN_DIR/reports/selfcheck.json and, when a check
// fails, RUN_DIR/reports/exclude.txt (the failing hosts, one per line, for the scheduler's
// --exclude). Exit code 0 when every check passes, 75 otherwise.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <memory>

#include "health/exit_codes.h"
#include "health/flight_dump.h"
#include "health/selfcheck.h"
#include "trainer/commands.h"

namespace megatrain {

Command add_selfcheck_command(CLI::App& root) {
  struct Options {
    SelfCheckOptions check;
    std::string run_dir;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("selfcheck", "Check every rank, link and the checkpoint storage before a start");
  app->add_option("--checkpoint-dir", opts->check.storage_dir, "Probe this folder's storage (write, fsync, read back)");
  app->add_option("--run-dir", opts->run_dir, "Write reports/selfcheck.json and reports/exclude.txt here");
  app->add_option("--min-free-mb", opts->check.min_free_mb, "Fail a host with less available memory")
      ->capture_default_str();
  return Command{app,
                 [opts] {
                   const Comm world = Comm::world();
                   const SelfCheckReport rep = run_selfcheck(world, opts->check);
                   if (world.rank() != 0) return rep.pass() ? 0 : kExitHang;
                   for (const SelfCheckResult& c : rep.checks)
                     fmt::print("selfcheck {:<10} {} {:6.3f} s  {}\n", c.name, c.pass ? "pass" : "FAIL", c.seconds, c.detail);
                   fmt::print("selfcheck {} in {:.2f} s{}\n", rep.pass() ? "passed" : "FAILED", rep.seconds,
                              rep.pass() ? "" : fmt::format(": ranks [{}] on hosts [{}]", fmt::join(rep.failing_ranks, ","),
                                                            fmt::join(rep.failing_hosts, ",")));
                   if (!opts->run_dir.empty()) {
                     const std::filesystem::path dir = std::filesystem::path(opts->run_dir) / "reports";
                     write_file_atomic((dir / "selfcheck.json").string(), rep.json());
                     if (!rep.pass())
                       write_file_atomic((dir / "exclude.txt").string(), fmt::format("{}\n", fmt::join(rep.failing_hosts, "\n")));
                   }
                   return rep.pass() ? 0 : kExitHang;
                 },
                 /*uses_mpi=*/true};
}

}  // namespace megatrain
