#include "trainer/memory_recovery.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>

#include "checkpoint/memory_snapshot.h"
#include "parallel/comm_gather.h"
#include "parallel/comm_text.h"
#include "trainer/checkpoint.h"
#include "trainer/memory_snapshots.h"

namespace megatrain {
namespace {

constexpr int kTag = 9103;

// For each step some host holds, the rank that provides each rank's snapshot: the rank itself when
// its own host holds it, else the lowest rank whose host does.
using Providers = std::map<int64_t, std::map<int, int>, std::greater<>>;

Providers providers(const std::vector<std::string>& inventories) {
  Providers out;
  for (int q = 0; q < static_cast<int>(inventories.size()); ++q)
    for (const StoredStep& s : parse_stored_steps(inventories[static_cast<size_t>(q)]))
      for (const int r : s.ranks) {
        auto [it, fresh] = out[s.step].try_emplace(r, q);
        if (!fresh && q == r) it->second = q;
      }
  return out;
}

}  // namespace

std::optional<CheckpointMeta> load_memory_snapshot(const Config& cfg, const CheckpointTensors& t, const Comm& world,
                                                   int64_t at_least) {
  const auto t0 = std::chrono::steady_clock::now();
  const MemoryStore store = memory_store_for(cfg, world);
  const Providers all = providers(all_gather_text(world, stored_steps_text(store.committed())));
  const int me = world.rank(), n = world.size();
  const auto found = std::find_if(all.begin(), all.end(), [&](const auto& s) {
    return s.first >= at_least && static_cast<int>(s.second.size()) == n;
  });
  if (found == all.end()) {
    if (me == 0)
      spdlog::info("memory snapshots: no complete set in {} at step {} or later; loading the storage checkpoint",
                   store.dir().parent_path().parent_path().string(), at_least);
    return std::nullopt;
  }
  const auto& [step, from] = *found;
  std::string mine;
  int64_t fetched = 0;
  for (const auto& [r, q] : from) {
    if (q != me && r != me) continue;
    if (q == me && r == me) {
      mine = store.get(step, r);
    } else if (q == me) {
      send_text(world, store.get(step, r), r, kTag);
    } else {
      recv_text(world, mine, q, kTag);
      fetched = 1;
    }
  }
  const SnapshotHeader h =
      restore_snapshot(mine, t, fmt::format("memory snapshot of rank {} at step {} ({})", me, step, store.dir().string()));
  int64_t totals[2] = {fetched, static_cast<int64_t>(mine.size())};
  world.all_reduce(totals, 2).wait();
  if (me == 0)
    spdlog::info("MEMORY_RESTORE step={} source=memory ranks={} read_local={} fetched={} bytes={} seconds={:.3f}", step,
                 n, n - totals[0], totals[0], totals[1],
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return CheckpointMeta{h.state, "", h.layout_json};
}

}  // namespace megatrain
