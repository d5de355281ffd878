#include "trainer/memory_snapshots.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "checkpoint/memory_snapshot.h"
#include "parallel/launch_env.h"
#include "trainer/checkpoint.h"

namespace megatrain {
namespace {

constexpr int kSizeTag = 9101, kBytesTag = 9102;

std::string default_memory_dir(const Config& cfg) {
  std::string name = std::filesystem::absolute(cfg.checkpoint.dir).lexically_normal().string();
  for (char& c : name)
    if (c == '/') c = '_';
  return "/dev/shm/megatrain/" + name;
}

// `bytes` to rank `to` while receiving from rank `from` (tagged sizes, then the bytes).
std::string exchange(const Comm& world, const std::string& bytes, int to, int from) {
  const auto n = static_cast<int64_t>(bytes.size());
  int64_t m = 0;
  Work send_n = world.send(&n, 1, to, kSizeTag);
  world.recv(&m, 1, from, kSizeTag).wait();
  send_n.wait();
  std::string in(static_cast<size_t>(m), '\0');
  Work send_b = world.send(reinterpret_cast<const uint8_t*>(bytes.data()), n, to, kBytesTag);
  world.recv(reinterpret_cast<uint8_t*>(in.data()), m, from, kBytesTag).wait();
  send_b.wait();
  return in;
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
  if (cfg.checkpoint.memory_interval > 0) store_.emplace(memory_store_for(cfg, run.world));
}

void MemorySnapshots::updated(const StepOutcome& out) {
  if (!store_ || out.step % cfg_.checkpoint.memory_interval != 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const Comm& world = run_.world;
  const int rank = world.rank(), buddy = memory_buddy(rank, world.size());
  const std::string own = encode_snapshot(run_.checkpoint_tensors(),
                                          {rank, world.size(), layout_json(cfg_, world.size()), at_.saved(out.step, cfg_)});
  int failed = 0;
  int64_t copy_bytes = 0;
  try {
    store_->put(out.step, rank, own);
    if (buddy >= 0) {
      const int from = memory_ward(rank, world.size());
      const std::string copy = exchange(world, own, buddy, from);
      copy_bytes = static_cast<int64_t>(copy.size());
      store_->put(out.step, from, copy);
    }
  } catch (const CheckpointError& e) {
    spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", out.step, rank, e.what());
    failed = 1;
  }
  world.all_reduce(&failed, 1, ReduceOp::max).wait();
  if (!failed) store_->commit(out.step);
  store_->prune(cfg_.checkpoint.memory_keep);
  if (!logged_ && rank == 0) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("memory snapshots: every {} steps in {}, {:.1f} MiB per rank{}, {:.1f} MiB on this host for the "
                 "newest {}; the first took {:.1f} ms",
                 cfg_.checkpoint.memory_interval, store_->dir().string(), static_cast<double>(own.size()) / (1 << 20),
                 buddy >= 0 ? fmt::format(" + {:.1f} MiB of rank {}'s state as its buddy",
                                          static_cast<double>(copy_bytes) / (1 << 20), memory_ward(rank, world.size()))
                            : " (one host: no buddy copy)",
                 static_cast<double>(store_->bytes()) / (1 << 20), cfg_.checkpoint.memory_keep, ms);
    logged_ = true;
  }
}

}  // namespace megatrain
