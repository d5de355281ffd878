// The subcommands of the `megatrain` binary. Each registers its options on the root CLI11 app and
// returns a runner; main() runs the one the user chose and turns exceptions into one clean abort.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>

namespace megatrain {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the process exit code
  // Runs on the MPI world (train, generate, export, import, selfcheck, plan: its --measure). The others are single-process tools
  // and start without MPI (main.cpp, [Note: MPI start]).
  bool uses_mpi = false;
};

Command add_train_command(CLI::App& root);
Command add_config_command(CLI::App& root);
Command add_preprocess_command(CLI::App& root);
Command add_generate_command(CLI::App& root);
Command add_export_command(CLI::App& root);
Command add_import_command(CLI::App& root);
Command add_tokenize_command(CLI::App& root);
Command add_data_command(CLI::App& root);
Command add_tokenizer_command(CLI::App& root);
Command add_diagnose_command(CLI::App& root);
Command add_selfcheck_command(CLI::App& root);
Command add_trace_command(CLI::App& root);
Command add_checkpoint_command(CLI::App& root);
Command add_plan_command(CLI::App& root);

}  // namespace megatrain
