// Loading checkpoints with fallback (trainer/checkpoint.h). Every decision that picks a folder is
// made on rank 0 and shared, and every refusal is the same CheckpointError on every rank, so all
// ranks issue the same collectives and reach the same outcome.
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/checkpoint_verify.h"
#include "config/model_compat.h"
#include "trainer/checkpoint.h"

namespace megatrain {
namespace fs = std::filesystem;
namespace {

// Refuses a checkpoint whose architecture differs from the config's (config/model_compat.h); logs
// the settings that may change and do.
void check_same_model(const std::string& path, const std::string& saved, const Config& current, bool verbose) {
  const ModelChanges changes = model_changes(saved, current);
  if (!changes.refused.empty())
    throw InputError(fmt::format(
        "CKPT_INCOMPATIBLE checkpoint {}: its [model] or [moe] differs from the config's and cannot be reconciled:"
        "\n  {}\nfix: use the checkpoint's [model] and [moe] settings, or start fresh (checkpoint.load = \"\"); README "
        "\"What a checkpoint fixes\" lists the settings that may change",
        path, fmt::join(changes.refused, "\n  ")));
  if (!verbose) return;
  for (const auto& c : changes.noted) spdlog::info("checkpoint {}: {} (a training-only setting)", path, c);
  // Moments are stored as float32 whatever kept them (optim/host_moments.h); say what a change does.
  const std::string was = toml::parse(saved)["optimizer"]["state_dtype"].value_or(std::string("fp32")),
                    now = precision_name(current.optimizer.state_dtype);
  if (was != now)
    spdlog::info("checkpoint {}: AdamW's moments were kept in {}, optimizer.state_dtype = \"{}\" keeps them in {}: {}",
                 path, was, now, now,
                 now == "bf16" ? "their float32 values are rounded to bf16 (nearest even)"
                               : "their bf16 values widen to float32 exactly");
  for (const auto& c : changes.warned)
    spdlog::warn("checkpoint {}: {}: the loaded weights now compute a different function", path, c);
}

// The folder checked against its manifest (`rule`), then read. A damaged folder is a CheckpointError
// worded CKPT_INVALID; a config the checkpoint cannot take is an InputError.
CheckpointMeta load_folder(const fs::path& folder, const CheckpointTensors& t, const Comm& comm, const Config& current,
                           bool verbose, ManifestRule rule) {
  const std::optional<Manifest> manifest = checkpoint_folder_check(folder, comm.handle(), rule);
  if (!manifest && verbose)
    spdlog::warn("checkpoint {}: no {}; loading {} on its own checksums (a checkpoint from before manifests, or one "
                 "assembled by hand)",
                 folder.string(), kManifestFile, kModelFile);
  const std::string file = (folder / kModelFile).string();
  try {
    return checkpoint_file_read(file, t, comm, [&](const CheckpointMeta& meta) {
      check_same_model(file, meta.config_toml, current, verbose);
    });
  } catch (const CheckpointError& e) {
    throw checkpoint_invalid(manifest ? std::optional(manifest->step) : checkpoint_step_of(folder.filename().string()),
                             file, checkpoint_reason(e.what(), file));
  }
}

// The folders checkpoint.load = "latest" tries, in order: every committed step_* (renamed from its
// .tmp: the rename is the commit) from the newest down. `latest` is a pointer for people and tools;
// when it is damaged, or lags the newest committed folder, that is said and the folder wins.
// Decided on rank 0, so every rank tries the same list.
std::vector<fs::path> load_candidates(const fs::path& dir, const Comm& comm) {
  std::string list;
  if (comm.rank() == 0) {
    const auto steps = committed_steps(dir);
    const LatestPointer latest = read_latest(dir);
    if (!steps.empty() && !latest.step)
      spdlog::warn("{}; using the newest committed checkpoint, {}",
                   checkpoint_invalid(std::nullopt, (dir / "latest").string(), latest.problem).what(),
                   checkpoint_step_name(steps.back()));
    else if (!steps.empty() && *latest.step != steps.back())
      spdlog::warn("checkpoint: latest pointer stale (it names \"{}\"), using step {}: the newest committed "
                   "checkpoint (a save may have ended between its commit and the pointer's update)",
                   checkpoint_step_name(*latest.step), steps.back());
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) list += (dir / checkpoint_step_name(*it)).string() + "\n";
  }
  ckpt::ShardGroup(comm.handle()).broadcast(list);
  std::vector<fs::path> candidates;
  std::istringstream in(list);
  for (std::string line; std::getline(in, line);) candidates.emplace_back(line);
  return candidates;
}

}  // namespace

std::string checkpoint_model_file(const std::string& arg) {
  fs::path folder = arg;
  MT_CHECKPOINT_CHECK(fs::is_directory(folder), "--checkpoint {}: no such folder; pass checkpoint.dir of a run or one of "
                 "its DIR/step_NNNNNNN folders", arg);
  if (!fs::exists(folder / kModelFile) && fs::exists(folder / "latest")) {
    std::ifstream latest(folder / "latest");
    std::string name;
    MT_CHECKPOINT_CHECK(static_cast<bool>(latest >> name), "--checkpoint {}: 'latest' is empty; pass a checkpoint folder "
                   "such as {}/step_0000100", arg, arg);
    folder /= name;
  }
  const fs::path file = folder / kModelFile;
  MT_CHECKPOINT_CHECK(fs::exists(file),
                 "--checkpoint {}: not a checkpoint: expected a folder holding model.h5 (DIR/step_NNNNNNN) or a "
                 "checkpoint dir holding 'latest'",
                 arg);
  return file.string();
}

std::optional<CheckpointMeta> checkpoint_load(const Config& cfg, const CheckpointTensors& t, const Comm& comm,
                                              bool allow_fresh_start, bool verbose) {
  const std::string& load = cfg.checkpoint.load;
  if (load.empty()) return std::nullopt;
  if (load != "latest") return load_folder(load, t, comm, cfg, verbose, ManifestRule::optional);
  const fs::path dir = cfg.checkpoint.dir;
  std::string reasons;
  for (const auto& c : load_candidates(dir, comm)) {
    try {
      CheckpointMeta meta = load_folder(c, t, comm, cfg, verbose, ManifestRule::required);
      if (verbose && !reasons.empty())
        spdlog::warn("checkpoint: fell back to {} because newer ones are invalid:{}", c.string(), reasons);
      if (verbose) spdlog::info("checkpoint: resumed from {} (step {})", c.string(), meta.state.step);
      return meta;
    } catch (const CheckpointError& e) {  // a config the checkpoint cannot take is not skipped: older ones differ too
      if (verbose) spdlog::warn("{}; trying the next older checkpoint", e.what());
      reasons += fmt::format("\n  {}", e.what());
    }
  }
  if (allow_fresh_start) {
    if (verbose) spdlog::warn("checkpoint: no valid checkpoint in {}; starting fresh (--allow-fresh-start){}",
                              dir.string(), reasons);
    return std::nullopt;
  }
  throw NoValidCheckpoint(fmt::format(
      "{}: checkpoint.load = \"latest\" but {} holds no valid checkpoint{}\nfix: point checkpoint.dir at the run's "
      "folder, or pass --allow-fresh-start to start from scratch",
      cfg.source, dir.string(), reasons.empty() ? std::string(" (it is empty)") : reasons));
}

}  // namespace megatrain
