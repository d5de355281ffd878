#include "trainer/memory_snapshots.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "checkpoint/memory_snapshot.h"
#include "parallel/comm_text.h"
#include "parallel/launch_env.h"
#include "trainer/checkpoint.h"

namespace megatrain {
namespace {

constexpr int kTag = 9101;

std::string default_memory_dir(const Config& cfg) {
  std::string name = std::filesystem::absolute(cfg.checkpoint.dir).lexically_normal().string();
  for (char& c : name)
    if (c == '/') c = '_';
  return "/dev/shm/megatrain/" + name;
}

}  // namespace

MemoryStore memory_store_for(const Config& cfg, const Comm& world) {
  const int per_node = ranks_per_node_from_env();
  const bool virtual_hosts = int_from_env("MEGATRAIN_RANKS_PER_NODE", 1, 0) > 0;
  const std::string node = virtual_hosts ? fmt::format("vnode{}", world.rank() / per_node) : host_name();
  return MemoryStore(cfg.checkpoint.memory_dir.empty() ? default_memory_dir(cfg) : cfg.checkpoint.memory_dir, node,
                     layout_json(cfg, world.size()));
}

int memory_buddy(int rank, int world) {
  const int per_node = ranks_per_node_from_env();
  return world <= per_node ? -1 : (rank + per_node) % world;
}

int memory_ward(int rank, int world) {
  const int per_node = ranks_per_node_from_env();
  return world <= per_node ? -1 : (rank - per_node % world + world) % world;
}

MemorySnapshots::MemorySnapshots(const Config& cfg, RankRun& run, const RunState& at) : cfg_(cfg), run_(run), at_(at) {
  if (cfg.checkpoint.memory_interval <= 0) return;
  store_.emplace(memory_store_for(cfg, run.world));
  comm_.emplace(run.world.split(0, run.world.rank(), "memory-snapshot"));
}

MemorySnapshots::~MemorySnapshots() {
  if (worker_.joinable()) worker_.join();
}

void MemorySnapshots::updated(const StepOutcome& out) {
  if (!store_ || out.step % cfg_.checkpoint.memory_interval != 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (worker_.joinable()) worker_.join();
  const Comm& world = run_.world;
  encode_snapshot_body(run_.checkpoint_tensors(),
                       {world.rank(), world.size(), layout_json(cfg_, world.size()), at_.saved(out.step, cfg_)}, own_);
  const double stall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  worker_ = std::thread([this, step = out.step, stall_ms] {
    try {
      seal_snapshot(own_);
      store(step, own_, stall_ms);
    } catch (const std::exception& e) {  // a failed exchange: the job's own failure handling follows
      spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", step, comm_->rank(), e.what());
    }
  });
}

void MemorySnapshots::discard(const std::string& why) {
  if (!store_) return;
  if (worker_.joinable()) worker_.join();
  comm_->barrier();  // every rank of the host has committed and pruned before its folder goes
  store_->clear();
  // Every host's folder is gone before any rank goes on: after a replica mismatch the first rank to
  // reach MPI_Abort ends the others at once (the resilient driver gives mpirun no SIGKILL grace).
  comm_->barrier();
  spdlog::info("memory snapshots: removed {} ({})", store_->dir().parent_path().string(), why);
}

void MemorySnapshots::store(int64_t step, const std::string& own, double stall_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = comm_->rank(), buddy = memory_buddy(rank, comm_->size()), ward = memory_ward(rank, comm_->size());
  int failed = 0;
  int64_t copy_bytes = 0;
  try {
    store_->put(step, rank, own);
    if (buddy >= 0) {
      exchange_text(*comm_, own, buddy, ward, copy_, kTag);
      copy_bytes = static_cast<int64_t>(copy_.size());
      store_->put(step, ward, copy_);
    }
  } catch (const CheckpointError& e) {
    spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", step, rank, e.what());
    failed = 1;
  }
  comm_->all_reduce(&failed, 1, ReduceOp::max).wait();
  if (!failed) store_->commit(step);
  store_->prune(cfg_.checkpoint.memory_keep);
  if (logged_ || rank != 0) return;
  logged_ = true;
  spdlog::info("memory snapshots: every {} steps in {}, {:.1f} MiB per rank{}, {:.1f} MiB on this host for the newest "
               "{}; the first stalled its step {:.1f} ms (the copy) and was stored in {:.1f} ms beside the next steps",
               cfg_.checkpoint.memory_interval, store_->dir().string(), static_cast<double>(own.size()) / (1 << 20),
               buddy >= 0 ? fmt::format(" + {:.1f} MiB of rank {}'s as its buddy",
                                        static_cast<double>(copy_bytes) / (1 << 20), ward)
                          : " (one host: no buddy copy)",
               static_cast<double>(store_->bytes()) / (1 << 20), cfg_.checkpoint.memory_keep, stall_ms,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace megatrain
