#include "trainer/memory_snapshots.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <future>

#include "health/fault_inject.h"
#include "health/median.h"
#include "trainer/checkpoint.h"
#include "trainer/memory_hosts.h"

namespace megatrain {
namespace {

constexpr int kTag = 9101;

}  // namespace

MemorySnapshots::MemorySnapshots(const Config& cfg, RankRun& run, const RunState& at) : cfg_(cfg), run_(run), at_(at) {
  if (cfg.checkpoint.memory_interval <= 0) return;
  store_.emplace(memory_store_for(cfg, run.world()));
  comm_.emplace(run.world().split(0, run.world().rank(), "memory-snapshot"));
}

MemorySnapshots::~MemorySnapshots() {
  if (worker_.joinable()) worker_.join();
}

void MemorySnapshots::waited(std::chrono::steady_clock::time_point since) {
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
  cost_.waited_ms += ms;
  cost_.most_waited_ms = std::max(cost_.most_waited_ms, ms);
}

void MemorySnapshots::updating(int64_t) {
  if (!copied_.valid()) return;
  const auto t0 = std::chrono::steady_clock::now();
  copied_.get();
  waited(t0);
}

void MemorySnapshots::updated(const StepOutcome& out) {
  if (!store_ || out.step % cfg_.checkpoint.memory_interval != 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (worker_.joinable()) worker_.join();
  waited(t0);
  const Comm& world = run_.world();
  // The state as the update left it (on a device, its host copy made now); nothing changes it
  // before the next update, which waits for the copy.
  SnapshotHeader header{world.rank(), world.size(), layout_json(cfg_, world.size()), at_.saved(out.step, cfg_, run_.data().train().sizes())};
  std::promise<void> copied;
  copied_ = copied.get_future();
  ++cost_.taken;
  worker_ = std::thread([this, step = out.step, state = run_.checkpoint_tensors(), header = std::move(header),
                         copied = std::move(copied)]() mutable {
    timespec cpu0{}, cpu1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
    const auto t0 = std::chrono::steady_clock::now();
    copy(step, state, header);
    copied.set_value();
    const auto t1 = std::chrono::steady_clock::now();
    try {
      store(step);
    } catch (const std::exception& e) {  // a failed exchange: the job's own failure handling follows
      spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", step, comm_->rank(), e.what());
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
    const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    cost_.copy_ms += ms(t0, t1);
    cost_.store_ms += ms(t1, std::chrono::steady_clock::now());
    cost_.cpu_ms.push_back(static_cast<double>(cpu1.tv_sec - cpu0.tv_sec) * 1e3 +
                           static_cast<double>(cpu1.tv_nsec - cpu0.tv_nsec) / 1e6);
  });
}

void MemorySnapshots::copy(int64_t step, const CheckpointTensors& state, const SnapshotHeader& header) {
  own_.reset();
  inject_checkpoint_delay(FaultPlan::from_environment(), header.rank, step);
  try {  // encoded straight into the file the store keeps
    own_.emplace(store_->write(step, header.rank, snapshot_size(state, header)));
    encode_snapshot_into(state, header, own_->data());
  } catch (const std::exception& e) {  // the thread still exchanges (nothing) and agrees that it failed
    spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", step, header.rank, e.what());
    own_.reset();
  }
}

void MemorySnapshots::discard(const std::string& why) {
  if (!store_) return;
  if (worker_.joinable()) worker_.join();
  copied_ = {};
  log_cost();
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

void MemorySnapshots::store(int64_t step) {
  const int rank = comm_->rank(), buddy = memory_buddy(rank, comm_->size()), ward = memory_ward(rank, comm_->size());
  int failed = own_ ? 0 : 1;
  int64_t copy_bytes = 0;
  const int64_t own_bytes = own_ ? static_cast<int64_t>(own_->size()) : 0;
  try {
    if (buddy >= 0 && !exchange(step, buddy, ward, copy_bytes)) failed = 1;
    if (own_) own_->finish();
  } catch (const CheckpointError& e) {
    spdlog::warn("MEMORY_SNAPSHOT_FAILED step={} rank={}: {}", step, rank, e.what());
    failed = 1;
  }
  comm_->all_reduce(&failed, 1, ReduceOp::max).wait();
  if (!failed) store_->commit(step);
  store_->prune(cfg_.checkpoint.memory_keep);
  own_.reset();
  if (cost_.taken == 1) log_first(own_bytes, copy_bytes);
}

void MemorySnapshots::log_first(int64_t own_bytes, int64_t copy_bytes) const {
  const int rank = comm_->rank();
  if (rank != 0) return;
  const int ward = memory_ward(rank, comm_->size());
  spdlog::info("memory snapshots: every {} steps in {}, {:.1f} MiB per rank{}, {:.1f} MiB on this host for the newest {}",
               cfg_.checkpoint.memory_interval, store_->dir().string(),
               static_cast<double>(own_bytes) / (1 << 20),
               ward >= 0 ? fmt::format(" + {:.1f} MiB of rank {}'s as its buddy",
                                       static_cast<double>(copy_bytes) / (1 << 20), ward)
                         : " (one host: no buddy copy)",
               static_cast<double>(store_->bytes()) / (1 << 20), cfg_.checkpoint.memory_keep);
}

// A line per rank: what it takes to judge a memory_interval (bench/memory_snapshots.sh reads it).
void MemorySnapshots::log_cost() const {
  if (cost_.taken == 0) return;
  const auto n = static_cast<double>(cost_.taken);
  double cpu = 0.0;
  for (double ms : cost_.cpu_ms) cpu += ms;
  spdlog::info("MEMORY_SNAPSHOT_COST rank={} snapshots={} mean_wait_ms={:.1f} max_wait_ms={:.1f} mean_copy_ms={:.1f} "
               "mean_store_ms={:.1f} mean_thread_cpu_ms={:.1f} median_thread_cpu_ms={:.1f}",
               comm_->rank(), cost_.taken, cost_.waited_ms / n, cost_.most_waited_ms, cost_.copy_ms / n,
               cost_.store_ms / n, cpu / n, median(cost_.cpu_ms));
}

}  // namespace megatrain
