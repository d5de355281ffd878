// Saving checkpoints, synchronously or in two stages (trainer/checkpoint.h). Each step of a save
// that ranks act on together ends in an agreement over the writers' communicator — the folder's
// preparation, the file write, the read-back CRC, the commit — so a failure anywhere is the same
// failure everywhere and no rank waits for another.
#include "trainer/checkpoint.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/file_io.h"
#include "health/fault_inject.h"

namespace megatrain {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

void make_empty_folder(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!ec) fs::create_directories(dir, ec);
  check_io(ec, "creating " + dir.string());
}

int64_t size_of(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  check_io(ec, "reading the size of " + file.string());
  return static_cast<int64_t>(size);
}

// checkpoint.keep_last: the oldest committed checkpoints beyond it go; a failure only warns (the
// save itself is committed).
void remove_old_checkpoints(const fs::path& dir, int keep_last) {
  auto steps = committed_steps(dir);
  for (size_t i = 0; keep_last > 0 && i + static_cast<size_t>(keep_last) < steps.size(); ++i) {
    std::error_code ec;
    fs::remove_all(dir / checkpoint_step_name(steps[i]), ec);
    if (ec) spdlog::warn("checkpoint: cannot remove {} (checkpoint.keep_last = {}): {}", checkpoint_step_name(steps[i]),
                         keep_last, ec.message());
  }
}

}  // namespace

std::string layout_json(const Config& cfg, int world) {
  const auto& p = cfg.parallel;
  return fmt::format(R"({{"tp":{},"pp":{},"cp":{},"ep":{},"dp":{},"world":{}}})", p.tp, p.pp, p.cp, p.ep, p.dp, world);
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

void Checkpointer::join() {
  if (worker_.joinable()) worker_.join();
  if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
}

void Checkpointer::wait() {
  join();
  report();
}

void Checkpointer::report() {
  if (!failure_) return;
  const Failure f = *std::exchange(failure_, std::nullopt);
  const bool exit = cfg_.checkpoint.on_save_fail == "exit";
  spdlog::error("CKPT_SAVE_FAILED step={} errno={} ({}) rank={}: the checkpoints committed before it and `latest` "
                "are kept; {}",
                f.step, errno_name(f.err), f.what, world_.rank(),
                exit ? "exiting with code 75 (checkpoint.on_save_fail = \"exit\")"
                     : "training continues (checkpoint.on_save_fail = \"continue\")");
  if (!exit) return;
  world_.barrier();  // every rank has said it before any rank ends the job
  throw CheckpointSaveFailed(fmt::format("CKPT_SAVE_FAILED step={} errno={} ({}); checkpoint.on_save_fail = \"exit\"",
                                         f.step, errno_name(f.err), f.what));
}

void Checkpointer::commit(const CheckpointMeta& meta, const std::vector<TensorCrc>& tensors, int64_t bytes,
                          uint32_t crc) {
  const fs::path dir = cfg_.checkpoint.dir;
  const int64_t step = meta.state.step;
  const std::string name = checkpoint_step_name(step);
  const fs::path tmp = dir / (name + ".tmp"), final_dir = dir / name;
  const FaultPlan& faults = FaultPlan::from_environment();
  std::optional<int64_t> parent;
  for (const int64_t s : committed_steps(dir))
    if (s < step) parent = s;
  const Manifest m = manifest_for(meta, tensors, bytes, crc, parent);
  fsync_path(tmp / kModelFile);
  write_file_durably(tmp / kManifestFile, manifest_to_json(m));
  fsync_path(tmp);
  inject_checkpoint_crash(faults, 0, step, "after_shard_before_commit");
  std::error_code ec;
  fs::remove_all(final_dir, ec);
  check_io(ec, "removing the older " + final_dir.string());
  fs::rename(tmp, final_dir, ec);
  check_io(ec, fmt::format("renaming {} to {}", tmp.string(), final_dir.string()));
  fsync_path(dir);
  inject_checkpoint_crash(faults, 0, step, "after_commit_before_latest");
  replace_file_durably(dir / "latest", name + "\n");
}

void Checkpointer::write(const CheckpointTensors& t, const CheckpointMeta& meta, Stall stall) {
  const auto t0 = Clock::now();
  const fs::path dir = cfg_.checkpoint.dir;
  const int64_t step = meta.state.step;
  const fs::path tmp = dir / (checkpoint_step_name(step) + ".tmp"), file = tmp / kModelFile;
  const bool rank0 = io_.rank() == 0;
  const FaultPlan& faults = FaultPlan::from_environment();
  inject_checkpoint_delay(faults, io_.rank(), step);
  CheckpointWritten written;
  int64_t bytes = 0;
  try {
    agree_on_io_failure(io_.handle(), rank0 ? io_failure_of([&] { make_empty_folder(tmp); }) : std::nullopt);
    inject_checkpoint_crash(faults, io_.rank(), step, "mid_shard_write");
    written = checkpoint_file_write(file.string(), t, meta, io_);
    agree_on_io_failure(io_.handle(), rank0 ? io_failure_of([&] { bytes = size_of(file); }) : std::nullopt);
    io_.broadcast(&bytes, 1, 0).wait();
    const uint32_t crc = file_crc32_shared(file, bytes, io_.handle());  // read back: what the disk holds
    agree_on_io_failure(io_.handle(),
                        rank0 ? io_failure_of([&] { commit(meta, written.tensors, bytes, crc); }) : std::nullopt);
  } catch (const CheckpointIoError&) {
    if (rank0) {
      std::error_code ignored;  // what is left is removed at the next start
      fs::remove_all(tmp, ignored);
    }
    throw;
  }
  std::vector<int64_t> per_rank(static_cast<size_t>(io_.size()));
  const std::vector<int64_t> ones(per_rank.size(), 1);
  io_.all_gather(per_rank.data(), &written.bytes, ones).wait();
  if (!rank0) return;
  remove_old_checkpoints(dir, cfg_.checkpoint.keep_last);
  const double secs = seconds_since(t0), mb = static_cast<double>(bytes) / 1e6;
  const std::string stages =
      cfg_.checkpoint.async
          ? fmt::format("training stalled {:.1f} ms (waiting for the previous save {:.1f} ms, stage 1: the copy to host "
                        "memory {:.1f} ms), stage 2 (background write and commit) {:.2f} s",
                        (stall.waiting_s + stall.copy_s) * 1e3, stall.waiting_s * 1e3, stall.copy_s * 1e3, secs)
          : fmt::format("training stalled {:.1f} ms (a synchronous save: the whole write and commit)",
                        (stall.waiting_s + secs) * 1e3);
  spdlog::info("checkpoint: step {} saved to {}: {:.1f} MB; {}, {:.1f} MB/s; tensor bytes per rank [{}]", step,
               (dir / checkpoint_step_name(step)).string(), mb, stages, mb / secs, fmt::join(per_rank, ", "));
}

void Checkpointer::write_keeping_failure(const CheckpointTensors& t, const CheckpointMeta& meta, Stall stall) {
  try {
    write(t, meta, stall);
  } catch (const CheckpointIoError& e) {
    failure_ = Failure{meta.state.step, e.err(), e.what()};
  } catch (...) {
    worker_error_ = std::current_exception();
  }
  writing_ = false;
}

bool Checkpointer::save(const std::function<CheckpointTensors()>& take, const TrainState& state, IfBusy if_busy) {
  const auto t0 = Clock::now();
  if (worker_.joinable() && if_busy == IfBusy::skip) {
    int64_t busy = writing_ ? 1 : 0;  // on any rank: every rank skips alike
    world_.all_reduce(&busy, 1, ReduceOp::max).wait();
    if (busy != 0) {
      if (world_.rank() == 0)
        spdlog::warn("CKPT_SAVE_SKIPPED step={} reason=the previous save is still being written (saves never overlap; "
                     "slow storage costs saves, not training time)",
                     state.step);
      return false;
    }
  }
  join();
  report();
  const double waited = seconds_since(t0);
  const CheckpointTensors t = take();  // on a device, the copy to the host: part of stage 1
  const CheckpointMeta meta{state, config_toml_, layout_json_};
  if (!cfg_.checkpoint.async) {
    write_keeping_failure(t, meta, Stall{seconds_since(t0), 0.0});
    join();
    report();
    return true;
  }
  // Only the partitions are written, so only the partitions are copied ([Note: checkpoint pieces]).
  host_.resize(t.pieces.size());
  CheckpointTensors copy{t.layout, t.stored, {}};
  for (size_t k = 0; k < t.pieces.size(); ++k) {
    const CheckpointPiece& p = t.pieces[k];
    const auto n = static_cast<size_t>(p.part_end - p.part_begin);
    const auto copy_partition = [&](std::vector<float>& to, const FlatSlice& s) {
      to.resize(n);
      if (n > 0) std::memcpy(to.data(), s.data + (p.part_begin - s.begin), sizeof(float) * n);
      return FlatSlice{to.data(), p.part_begin, p.part_end};
    };
    copy.pieces.push_back({copy_partition(host_[k][0], p.params), copy_partition(host_[k][1], p.exp_avg),
                           copy_partition(host_[k][2], p.exp_avg_sq), p.part_begin, p.part_end, p.begin});
  }
  const Stall copied{waited, seconds_since(t0) - waited};
  writing_ = true;
  worker_ = std::thread([this, copy, meta, copied] { write_keeping_failure(copy, meta, copied); });
  return true;
}

}  // namespace megatrain
