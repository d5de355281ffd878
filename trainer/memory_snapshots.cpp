#include "trainer/memory_snapshots.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "checkpoint/memory_snapshot.h"
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
  const CheckpointTensors state = run_.checkpoint_tensors();
  const SnapshotHeader header{world.rank(), world.size(), layout_json(cfg_, world.size()), at_.saved(out.step, cfg_)};
  own_.reset();
  try {  // encoded straight into the file the store keeps
    own_.emplace(store_->write(out.step, world.rank(), snapshot_size(state, header)));
    encode_snapshot_body(state, header, own_->data());
  } catch (const CheckpointError& e) {  // the thread still exchanges (nothing) and agrees that it failed
    spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", out.step, world.rank(), e.what());
    own_.reset();
  }
  const double stall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  worker_ = std::thread([this, step = out.step, stall_ms] {
    try {
      store(step, stall_ms);
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

// Sends this rank's snapshot (n bytes; 0 when it could not be written) to `to` and receives the
// ward's from `from` straight into a file of the store; false when the ward's is missing or could not
// be kept (its bytes are then received and dropped, so that every send meets its receive).
bool MemorySnapshots::exchange(int64_t step, int to, int from, int64_t& received) {
  const int64_t n = own_ ? static_cast<int64_t>(own_->size()) : 0;
  int64_t m = 0;
  Work send_n = comm_->send(&n, 1, to, kTag);
  comm_->recv(&m, 1, from, kTag).wait();
  send_n.wait();
  received = m;
  std::optional<MemoryStore::Writing> copy;
  std::string dropped;
  try {
    if (m > 0) copy.emplace(store_->write(step, from, static_cast<size_t>(m)));
  } catch (const CheckpointError& e) {
    spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", step, comm_->rank(), e.what());
  }
  if (m > 0 && !copy) dropped.resize(static_cast<size_t>(m));
  char* into = copy ? copy->data() : dropped.data();
  Work send_b = n > 0 ? comm_->send(reinterpret_cast<const uint8_t*>(own_->data()), n, to, kTag) : Work();
  if (m > 0) comm_->recv(reinterpret_cast<uint8_t*>(into), m, from, kTag).wait();
  if (n > 0) send_b.wait();
  if (!copy) return false;
  copy->finish();
  return true;
}

void MemorySnapshots::store(int64_t step, double stall_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = comm_->rank(), buddy = memory_buddy(rank, comm_->size()), ward = memory_ward(rank, comm_->size());
  int failed = own_ ? 0 : 1;
  int64_t copy_bytes = 0;
  const int64_t own_bytes = own_ ? static_cast<int64_t>(own_->size()) : 0;
  try {
    if (own_) seal_snapshot(own_->data(), own_->size());
    if (buddy >= 0 && !exchange(step, buddy, ward, copy_bytes)) failed = 1;
    if (own_) own_->finish();
  } catch (const CheckpointError& e) {
    spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", step, rank, e.what());
    failed = 1;
  }
  own_.reset();
  comm_->all_reduce(&failed, 1, ReduceOp::max).wait();
  if (!failed) store_->commit(step);
  store_->prune(cfg_.checkpoint.memory_keep);
  if (logged_ || rank != 0) return;
  logged_ = true;
  spdlog::info("memory snapshots: every {} steps in {}, {:.1f} MiB per rank{}, {:.1f} MiB on this host for the newest "
               "{}; the first stalled its step {:.1f} ms (the copy) and was stored in {:.1f} ms beside the next steps",
               cfg_.checkpoint.memory_interval, store_->dir().string(), static_cast<double>(own_bytes) / (1 << 20),
               buddy >= 0 ? fmt::format(" + {:.1f} MiB of rank {}'s as its buddy",
                                        static_cast<double>(copy_bytes) / (1 << 20), ward)
                          : " (one host: no buddy copy)",
               static_cast<double>(store_->bytes()) / (1 << 20), cfg_.checkpoint.memory_keep, stall_ms,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace megatrain
