// Checkpoint directories, saving (sync and async) and loading with fallback (checkpoint.h). Every
// decision that picks a file is made on rank 0 and shared, so all ranks issue the same collectives.
#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint_shard.h"
#include "health/fault_inject.h"
#include "trainer/model_compat.h"

namespace megatrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kModelFile = "model.h5";

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Writes `text` to `path` atomically: path.tmp, fsync, rename.
void write_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    MT_CHECK(out.good(), "cannot write {}", tmp.string());
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
  fsync_path(path.parent_path());
}

std::vector<int64_t> complete_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  if (!fs::is_directory(dir)) return steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.size() == 12 && n.starts_with("step_") && n.find_first_not_of("0123456789", 5) == std::string::npos)
      steps.push_back(std::stoll(n.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Refuses a checkpoint whose architecture differs from the config's (trainer/model_compat.h); logs
// the settings that may change and do.
void check_same_model(const std::string& path, const std::string& saved, const Config& current, bool verbose) {
  const ModelChanges changes = model_changes(saved, current);
  if (!changes.refused.empty())
    throw InputError(fmt::format(
        "CKPT_INCOMPATIBLE checkpoint {}: its [model] differs from the config's and cannot be reconciled:\n  {}\n"
        "fix: use the checkpoint's [model] settings, or start fresh (checkpoint.load = \"\"); README "
        "\"What a checkpoint fixes\" lists the settings that may change",
        path, fmt::join(changes.refused, "\n  ")));
  if (!verbose) return;
  for (const auto& c : changes.noted) spdlog::info("checkpoint {}: {} (a training-only setting)", path, c);
  for (const auto& c : changes.warned)
    spdlog::warn("checkpoint {}: {}: the loaded weights now compute a different function", path, c);
}

CheckpointMeta load_one(const fs::path& dir, const CheckpointTensors& t, const Comm& comm, const Config& current,
                        bool verbose) {
  const std::string file = (dir / kModelFile).string();
  return checkpoint_file_read(file, t, comm, [&](const CheckpointMeta& meta) {
    check_same_model(file, meta.config_toml, current, verbose);
  });
}

// Removes the step_*.tmp folders of saves that never committed (a crash mid-save) and says so.
void remove_unfinished_saves(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || !n.starts_with("step_") || !n.ends_with(".tmp")) continue;
    uintmax_t bytes = 0;
    for (const auto& f : fs::recursive_directory_iterator(e.path()))
      if (f.is_regular_file()) bytes += f.file_size();
    fs::remove_all(e.path());
    spdlog::warn("checkpoint: removed {} ({:.1f} MiB), a save that never committed", e.path().string(),
                 static_cast<double>(bytes) / (1 << 20));
  }
}

// The folders checkpoint.load = "latest" tries, in order: every committed step_* (renamed from its
// .tmp: the rename is the commit) from the newest down. `latest` is a pointer for people and tools;
// when it lags the newest committed folder, that is said and the folder wins. Decided on rank 0, so
// every rank tries the same list.
std::vector<fs::path> load_candidates(const fs::path& dir, const Comm& comm) {
  std::string list;
  if (comm.rank() == 0) {
    std::ifstream latest(dir / "latest");
    std::string named;
    latest >> named;
    const auto steps = complete_steps(dir);
    if (!steps.empty() && named != checkpoint_step_name(steps.back()))
      spdlog::warn("checkpoint: latest pointer stale (it names \"{}\"), using step {}: the newest committed "
                   "checkpoint (a save may have ended between its commit and the pointer's update)",
                   named, steps.back());
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) list += (dir / checkpoint_step_name(*it)).string() + "\n";
  }
  ckpt::ShardGroup(comm.handle()).broadcast(list);
  std::vector<fs::path> candidates;
  std::istringstream in(list);
  for (std::string line; std::getline(in, line);) candidates.emplace_back(line);
  return candidates;
}

std::string layout_json(const Config& cfg, int world) {
  const auto& p = cfg.parallel;
  return fmt::format(R"({{"tp":{},"pp":{},"cp":{},"ep":{},"dp":{},"world":{}}})", p.tp, p.pp, p.cp, p.ep, p.dp, world);
}

}  // namespace

std::string checkpoint_step_name(int64_t step) { return fmt::format("step_{:07}", step); }

std::string checkpoint_model_file(const std::string& arg) {
  fs::path folder = arg;
  MT_CHECKPOINT_CHECK(fs::is_directory(folder), "--checkpoint {}: no such folder; pass checkpoint.dir of a run or one of "
                 "its DIR/step_NNNNNNN folders", arg);
  if (!fs::exists(folder / "model.h5") && fs::exists(folder / "latest")) {
    std::ifstream latest(folder / "latest");
    std::string name;
    MT_CHECKPOINT_CHECK(static_cast<bool>(latest >> name), "--checkpoint {}: 'latest' is empty; pass a checkpoint folder "
                   "such as {}/step_0000100", arg, arg);
    folder /= name;
  }
  const fs::path file = folder / "model.h5";
  MT_CHECKPOINT_CHECK(fs::exists(file),
                 "--checkpoint {}: not a checkpoint: expected a folder holding model.h5 (DIR/step_NNNNNNN) or a "
                 "checkpoint dir holding 'latest'",
                 arg);
  return file.string();
}

Checkpointer::Checkpointer(const Config& cfg, const Comm& world)
    : cfg_(cfg), world_(world), io_(world.split(0, world.rank(), "checkpoint-io")),
      config_toml_(config_to_toml(cfg)), layout_json_(layout_json(cfg, world.size())) {
  if (world.rank() == 0) {
    fs::create_directories(cfg.checkpoint.dir);
    remove_unfinished_saves(cfg.checkpoint.dir);
  }
  world.barrier();
}

Checkpointer::~Checkpointer() {
  if (worker_.joinable()) worker_.join();
}

void Checkpointer::wait() {
  if (worker_.joinable()) worker_.join();
  if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
}

void Checkpointer::write(const CheckpointTensors& t, const CheckpointMeta& meta) {
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path dir = cfg_.checkpoint.dir;
  const std::string name = checkpoint_step_name(meta.state.step);
  const fs::path tmp = dir / (name + ".tmp"), final_dir = dir / name;
  const FaultPlan& faults = FaultPlan::from_environment();
  const int64_t step = meta.state.step;
  inject_checkpoint_delay(faults, io_.rank(), step);
  if (io_.rank() == 0) {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  }
  io_.barrier();
  inject_checkpoint_crash(faults, io_.rank(), step, "mid_shard_write");
  checkpoint_file_write((tmp / kModelFile).string(), t, meta, io_);
  io_.barrier();
  if (io_.rank() == 0) {
    fsync_path(tmp / kModelFile);
    fsync_path(tmp);
    inject_checkpoint_crash(faults, 0, step, "after_shard_before_commit");
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
    fsync_path(dir);
    inject_checkpoint_crash(faults, 0, step, "after_commit_before_latest");
    write_atomic(dir / "latest", name + "\n");
    if (cfg_.checkpoint.keep_last > 0) {
      auto steps = complete_steps(dir);
      while (static_cast<int>(steps.size()) > cfg_.checkpoint.keep_last) {
        fs::remove_all(dir / checkpoint_step_name(steps.front()));
        steps.erase(steps.begin());
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double mb = static_cast<double>(fs::file_size(final_dir / kModelFile)) / 1e6;
    spdlog::info("checkpoint: wrote {} ({:.1f} MB in {:.2f} s, {:.0f} MB/s)", final_dir.string(), mb, secs, mb / secs);
  }
  io_.barrier();
}

double Checkpointer::save(const CheckpointTensors& t, const TrainState& state) {
  const auto t0 = std::chrono::steady_clock::now();
  wait();
  const CheckpointMeta meta{state, config_toml_, layout_json_};
  if (!cfg_.checkpoint.async) {
    write(t, meta);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Only the partition is written, so only the partition is copied.
  const auto n = static_cast<size_t>(t.part_end - t.part_begin);
  const auto copy_partition = [&](std::vector<float>& host, const FlatSlice& s) {
    host.resize(n);
    if (n > 0) std::memcpy(host.data(), s.data + (t.part_begin - s.begin), sizeof(float) * n);
    return FlatSlice{host.data(), t.part_begin, t.part_end};
  };
  const CheckpointTensors copy{t.layout, copy_partition(host_params_, t.params), copy_partition(host_m_, t.exp_avg),
                               copy_partition(host_v_, t.exp_avg_sq), t.part_begin, t.part_end, t.stored};
  worker_ = std::thread([this, copy, meta] {
    try {
      write(copy, meta);
    } catch (...) {
      worker_error_ = std::current_exception();
    }
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::optional<CheckpointMeta> checkpoint_load(const Config& cfg, const CheckpointTensors& t, const Comm& comm,
                                              bool allow_fresh_start, bool verbose) {
  const std::string& load = cfg.checkpoint.load;
  if (load.empty()) return std::nullopt;
  if (load != "latest") return load_one(load, t, comm, cfg, verbose);
  const fs::path dir = cfg.checkpoint.dir;
  std::string reasons;
  for (const auto& c : load_candidates(dir, comm)) {
    try {
      CheckpointMeta meta = load_one(c, t, comm, cfg, verbose);
      if (verbose && !reasons.empty())
        spdlog::warn("checkpoint: fell back to {} because newer ones are invalid:{}", c.string(), reasons);
      if (verbose) spdlog::info("checkpoint: resumed from {} (step {})", c.string(), meta.state.step);
      return meta;
    } catch (const CheckpointError& e) {  // a config the checkpoint cannot take is not skipped: older ones differ too
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
