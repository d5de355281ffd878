// `megatrain checkpoint verify PATH`: checks checkpoints without loading them into a model — one
// folder (DIR/step_NNNNNNN) or every committed folder of a checkpoint dir — against their
// manifest.json and checksums, in this process alone (checkpoint/checkpoint_verify.h). One line
// per step, OK or CKPT_INVALID; exit code 0 when every step is valid, 66 when one is not, 64 when
// PATH is neither a checkpoint folder nor a checkpoint dir.
// `megatrain checkpoint forget-memory ROOT`: removes this host's memory snapshots of a run,
// ROOT/<host>/ (checkpoint/memory_store.h; ROOT: the run's checkpoint.memory_dir, as the log line
// "memory snapshots: every K steps in ROOT/<host>/<layout>" says), and ROOT when that empties it. The
// resilient driver runs it on a host it left out when the job ends, which no rank of the job cleared.
// Exit code 0, also when there is nothing to remove; 64 when ROOT/<host> is not a memory store.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/memory_store.h"
#include "cli/commands.h"
#include "health/exit_codes.h"
#include "parallel/comm.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;

// The step folders PATH stands for; says what else it finds in a checkpoint dir.
std::vector<fs::path> folders_of(const fs::path& path) {
  MT_INPUT_CHECK(fs::is_directory(path), "{}: no such folder; pass a checkpoint folder (DIR/step_NNNNNNN) or a "
                 "checkpoint dir (a run's checkpoint.dir)", path.string());
  if (checkpoint_step_of(path.filename().string()) || fs::exists(path / kModelFile) || fs::exists(path / kManifestFile))
    return {path};
  std::vector<fs::path> folders;
  for (const int64_t step : committed_steps(path)) folders.push_back(path / checkpoint_step_name(step));
  for (const auto& e : fs::directory_iterator(path))
    if (const std::string n = e.path().filename().string(); e.is_directory() && n.starts_with("step_") && n.ends_with(".tmp"))
      fmt::print("SKIPPED {} (a save that never committed; the next training start removes it)\n", e.path().string());
  const LatestPointer latest = read_latest(path);
  MT_INPUT_CHECK(!folders.empty() || latest.problem != "missing", "{}: holds no checkpoint folder (step_NNNNNNN) "
                 "and no 'latest': not a checkpoint dir; pass a run's checkpoint.dir or one of its step folders",
                 path.string());
  if (folders.empty()) return folders;
  if (latest.step)
    fmt::print("latest: {}\n", checkpoint_step_name(*latest.step));
  else
    fmt::print("latest: {} ({}); checkpoint.load = \"latest\" uses the newest committed checkpoint\n",
               (path / "latest").string(), latest.problem);
  return folders;
}

int verify(const fs::path& path) {
  const std::vector<fs::path> folders = folders_of(path);
  if (folders.empty()) {
    fmt::print("CKPT_INVALID step=? file={} reason=no committed checkpoint\n", path.string());
    return kExitCheckpoint;
  }
  int invalid = 0;
  for (const fs::path& folder : folders) {
    try {
      const FolderVerified v = checkpoint_folder_verify(folder);
      const double mb = static_cast<double>(v.bytes) / 1e6;
      fmt::print("OK step={} {} ({:.1f} MB in {:.3f} s, {:.0f} MB/s)\n", v.manifest.step, folder.string(), mb,
                 v.seconds, mb / v.seconds);
    } catch (const CheckpointError& e) {
      fmt::print("{}\n", e.what());
      ++invalid;
    }
  }
  return invalid == 0 ? 0 : kExitCheckpoint;
}

int forget_memory(const fs::path& root, const std::string& node) {
  try {
    const int64_t bytes = MemoryStore::forget(root, node);
    const std::string what =
        bytes ? fmt::format("removed {:.1f} MiB in", static_cast<double>(bytes) / (1 << 20)) : std::string("none in");
    fmt::print("memory snapshots: {} {}\n", what, (root / node).string());
    return 0;
  } catch (const CheckpointError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return kExitUsage;
  }
}

}  // namespace

Command add_checkpoint_command(CLI::App& root) {
  auto path = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand("checkpoint", "Work with checkpoints");
  app->require_subcommand(1);
  CLI::App* verify_app = app->add_subcommand(
      "verify", "Check checkpoints against their manifest.json: size, whole-file and per-tensor CRC-32");
  verify_app->add_option("PATH", *path, "A checkpoint folder (DIR/step_NNNNNNN), or a checkpoint dir: every committed "
                                        "step in it")
      ->required();
  auto memory_root = std::make_shared<std::string>(), node = std::make_shared<std::string>(host_name());
  CLI::App* forget_app = app->add_subcommand("forget-memory", "Remove this host's memory snapshots of a run");
  forget_app->add_option("ROOT", *memory_root, "The run's checkpoint.memory_dir (by default "
                                               "/dev/shm/megatrain/<checkpoint.dir with / as _>)")
      ->required();
  forget_app->add_option("--node", *node, "The host's folder under ROOT (default: this host's name)");
  return {app, [=] { return verify_app->parsed() ? verify(*path) : forget_memory(*memory_root, *node); }};
}

}  // namespace megatrain
