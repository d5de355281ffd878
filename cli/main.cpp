// megatrain: one binary, several subcommands. [Note: MPI start] The commands that run on the MPI
// world (Command::uses_mpi: train, generate, export, import) initialise MPI before parsing their
// options (a world of one is still a world); the single-process tools (tokenize, tokenizer,
// preprocess, data, config) never start it, so they do not pay its start-up (a few tenths of a
// second per call) and run where MPI cannot start. Any exception ends here: the message is
// printed as "[rank r host h] error: …" and an MPI job is aborted so no peer waits forever in a
// collective.
// The exit code says what ended the run (health/exit_codes.h): each error class maps to one.
// SIGXFSZ is ignored: a checkpoint that outgrows the file-size limit (RLIMIT_FSIZE) then fails its
// write with EFBIG, reported as a failed save, instead of killing the process.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <optional>
#include <string_view>
#include <vector>

#include "health/startup_times.h"
#include "kernels/check.h"
#include "parallel/comm.h"
#include "trainer/checkpoint.h"
#include "cli/commands.h"
#include "trainer/replica_check.h"
#include "health/exit_codes.h"
#include "trainer/stop_request.h"
#include "trainer/train.h"

namespace {

int exit_code_of(const std::exception& e) {
  using namespace megatrain;
  if (dynamic_cast<const NonFiniteSteps*>(&e)) return kExitNonFinite;
  if (dynamic_cast<const CommError*>(&e) || dynamic_cast<const ReplicaMismatch*>(&e) ||
      dynamic_cast<const CheckpointSaveFailed*>(&e))
    return kExitHang;
  if (dynamic_cast<const DataError*>(&e)) return kExitData;
  if (dynamic_cast<const CheckpointError*>(&e)) return kExitCheckpoint;
  if (dynamic_cast<const InputError*>(&e)) return kExitUsage;
  return kExitSoftware;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace megatrain;
  CLI::App app{"megatrain: trains GPT and Mixture-of-Experts language models"};
  app.require_subcommand(1);
  std::vector<Command> commands = {add_train_command(app), add_config_command(app), add_preprocess_command(app),
                                   add_generate_command(app), add_export_command(app), add_import_command(app),
                                   add_tokenize_command(app), add_data_command(app), add_tokenizer_command(app),
                                   add_diagnose_command(app), add_selfcheck_command(app),
                                   add_trace_command(app), add_checkpoint_command(app),
                                   add_plan_command(app)};
  const bool uses_mpi = argc > 1 && std::ranges::any_of(commands, [&](const Command& c) {
    return c.uses_mpi && c.app->get_name() == argv[1];
  });
  std::signal(SIGXFSZ, SIG_IGN);
  // Before MPI or any library starts a thread (trainer/stop_request.h [Note: held stop signals]).
  if (argc > 1 && std::string_view(argv[1]) == "train") hold_stop_signals();
  std::optional<MpiRuntime> mpi;
  if (uses_mpi) mpi.emplace(&argc, &argv);
  StartupTimes::instance().mark("process start → MPI init");
  const int rank = uses_mpi ? Comm::world().rank() : 0;
  const int world_size = uses_mpi ? Comm::world().size() : 1;
  spdlog::set_pattern("[%H:%M:%S] %v");
  if (rank != 0) spdlog::set_level(spdlog::level::warn);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = rank == 0 ? app.exit(e) : e.get_exit_code();
    return rc == 0 ? 0 : kExitUsage;
  }

  int code = 0;
  std::string message;
  try {
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const std::exception& e) {
    code = exit_code_of(e);
    message = e.what();
  }
  fmt::print(stderr, "[rank {} host {}] error: {}\n", rank, host_name(), message);
  std::fflush(stderr);
  if (world_size > 1) Comm::world().abort(code);
  return code;
}
