#include "trainer/memory_recovery.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <sstream>
#include <tuple>

#include "checkpoint/memory_snapshot.h"
#include "parallel/comm_gather.h"
#include "parallel/groups.h"
#include "trainer/checkpoint.h"
#include "trainer/memory_hosts.h"

namespace megatrain {
namespace {

constexpr int kTag = 9103;

// A set of snapshots the job's hosts hold: its layout, its step, and for each rank of that layout
// the ranks of this job whose hosts hold its snapshot, ascending.
struct HeldSet {
  std::string layout;
  int64_t step = 0;
  std::map<int, std::vector<int>> holders;
};

// This host's committed sets, every layout: one line per layout, "JSON<tab>STEPS" (stored_steps_text).
std::string inventory(const std::vector<MemoryStore>& layouts) {
  std::string out;
  for (const MemoryStore& s : layouts) out += s.layout_json() + "\t" + stored_steps_text(s.committed()) + "\n";
  return out;
}

std::vector<HeldSet> held_sets(const std::vector<std::string>& inventories) {
  std::map<std::pair<std::string, int64_t>, std::map<int, std::vector<int>>> sets;
  for (int q = 0; q < static_cast<int>(inventories.size()); ++q) {
    std::istringstream lines(inventories[static_cast<size_t>(q)]);
    for (std::string line; std::getline(lines, line);) {
      const size_t tab = line.find('\t');
      MT_CHECK(tab != std::string::npos, "memory snapshot inventory line \"{}\" is malformed", line);
      for (const StoredStep& s : parse_stored_steps(line.substr(tab + 1)))
        for (const int r : s.ranks) sets[{line.substr(0, tab), s.step}][r].push_back(q);
    }
  }
  std::vector<HeldSet> out;
  for (auto& [key, holders] : sets) out.push_back({key.first, key.second, std::move(holders)});
  return out;
}

// The layout's sizes (dp from the world, as the run resolves it); nullopt when it does not parse.
std::optional<ParallelDims> dims_of(const std::string& layout_json) {
  const auto j = nlohmann::json::parse(layout_json, nullptr, false);
  const auto get = [&](const char* k) {
    return j.is_object() && j.contains(k) && j[k].is_number_integer() ? j[k].get<int>() : 0;
  };
  ParallelDims d{get("tp"), get("cp"), get("ep"), 0, get("pp")};
  const int world = get("world");
  if (d.tp <= 0 || d.cp <= 0 || d.ep <= 0 || d.pp <= 0 || world <= 0 || world % (d.tp * d.cp * d.pp) != 0)
    return std::nullopt;
  d.dp = world / (d.tp * d.cp * d.pp);
  return d;
}

// What a rank's slice of the dense model is: its tensor-parallel coordinate and its stage.
// Context-parallel and expert-parallel ranks hold the same dense parameters (ZeRO shards them over
// cp·dp, ep included: parallel/groups.h dp_cp), so layouts that differ only in dp and cp hold the
// same views; a rank's experts are those of its ep coordinate ([Note: dense pieces across ep] in
// checkpoint/memory_snapshot.h).
auto dense_view(const ParallelDims& d, int rank) {
  const RankCoords c = rank_coords(d, rank);
  return std::tuple{c.tp, c.pp};
}

// The newest set at step ≥ at_least whose every rank some host holds, at this layout or at one that
// differs only in dp and cp (a tie goes to this layout); nullptr when there is none.
const HeldSet* newest_usable(const std::vector<HeldSet>& sets, const std::string& here, const ParallelDims& now,
                             int64_t at_least) {
  const HeldSet* best = nullptr;
  for (const HeldSet& s : sets) {
    const auto was = dims_of(s.layout);
    const bool same = s.layout == here;
    if (s.step < at_least || !was) continue;
    if (!same && std::tuple{was->tp, was->ep, was->pp} != std::tuple{now.tp, now.ep, now.pp}) continue;
    if (static_cast<int>(s.holders.size()) != was->world() || s.holders.rbegin()->first >= was->world()) continue;
    if (!best || s.step > best->step || (s.step == best->step && same)) best = &s;
  }
  return best;
}

}  // namespace

std::optional<CheckpointMeta> load_memory_snapshot(const Config& cfg, const CheckpointTensors& t, const Comm& world,
                                                   int64_t at_least) {
  const auto t0 = std::chrono::steady_clock::now();
  const MemoryStore store = memory_store_for(cfg, world);
  const std::vector<MemoryStore> layouts = store.host_layouts();
  const std::vector<HeldSet> sets = held_sets(all_gather_text(world, inventory(layouts)));
  const int me = world.rank(), n = world.size();
  const std::string here = layout_json(cfg, n);
  const ParallelDims now = *dims_of(here);
  const HeldSet* found = newest_usable(sets, here, now, at_least);
  if (!found) {
    if (me == 0)
      spdlog::info("memory snapshots: no complete set in {} at step {} or later; loading the storage checkpoint",
                   store.dir().parent_path().parent_path().string(), at_least);
    return std::nullopt;
  }
  const HeldSet& set = *found;
  const bool same = set.layout == here;
  const ParallelDims was = *dims_of(set.layout);
  // Rank m's snapshots: those of the ranks that held its view of the dense model (its dp_cp group's
  // at this layout), each with whether it holds m's experts too (the same ep coordinate).
  const auto needs = [&](int m) {
    std::vector<std::pair<int, bool>> out;
    for (int r = 0; r < was.world(); ++r)
      if (dense_view(was, r) == dense_view(now, m))
        out.emplace_back(r, rank_coords(was, r).ep == rank_coords(now, m).ep);
    return out;
  };
  // This host's folder of the set's layout; layouts.end() when the host holds none of it.
  const auto held = std::find_if(layouts.begin(), layouts.end(),
                                 [&](const MemoryStore& s) { return s.layout_json() == set.layout; });
  const auto read = [&](int r) {  // "" when it cannot: the restore below then fails on the rank that needs it
    try {
      if (held != layouts.end()) return held->get(set.step, r);
    } catch (const CheckpointError& e) {
      spdlog::warn("memory snapshots: {}", e.what());
    }
    return std::string();
  };
  // Every rank walks the same transfers in the same order; its own are then posted all at once (the
  // lengths, then the bytes: MPI matches each pair of ranks' messages in the order posted), so that
  // a rank fetching several snapshots, or a holder serving several ranks, moves them side by side.
  std::deque<std::string> mine, outbox;                 // deques: the posted buffers do not move
  std::vector<std::pair<int, std::string*>> ins, outs;  // peer, text
  int64_t totals[4] = {0, 0, 0, 0};                     // read on the own host, fetched, bytes, failed
  std::vector<bool> experts_too;                        // of `mine`, in order
  for (int m = 0; m < n; ++m)
    for (const auto& [r, experts] : needs(m)) {
      if (m == me) experts_too.push_back(experts);
      const std::vector<int>& h = set.holders.at(r);
      const bool at_home = std::binary_search(h.begin(), h.end(), m);
      if (m == me && at_home) {
        mine.push_back(read(r)), ++totals[0];
      } else if (m == me) {
        ins.emplace_back(h.front(), &mine.emplace_back()), ++totals[1];
      } else if (!at_home && h.front() == me) {
        outs.emplace_back(m, &outbox.emplace_back(read(r)));
      }
    }
  std::vector<int64_t> in_bytes(ins.size()), out_bytes(outs.size());
  std::vector<Work> posted;
  for (size_t i = 0; i < ins.size(); ++i) posted.push_back(world.recv(&in_bytes[i], 1, ins[i].first, kTag));
  for (size_t i = 0; i < outs.size(); ++i) {
    out_bytes[i] = static_cast<int64_t>(outs[i].second->size());
    posted.push_back(world.send(&out_bytes[i], 1, outs[i].first, kTag));
  }
  for (Work& w : posted) w.wait();
  posted.clear();
  for (size_t i = 0; i < ins.size(); ++i) {
    std::string& text = *ins[i].second;
    text.resize(static_cast<size_t>(in_bytes[i]));
    posted.push_back(world.recv(reinterpret_cast<uint8_t*>(text.data()), in_bytes[i], ins[i].first, kTag + 1));
  }
  for (size_t i = 0; i < outs.size(); ++i)
    posted.push_back(world.send(reinterpret_cast<const uint8_t*>(outs[i].second->data()), out_bytes[i], outs[i].first,
                                kTag + 1));
  for (Work& w : posted) w.wait();
  const std::vector<std::string> snapshots(std::make_move_iterator(mine.begin()), std::make_move_iterator(mine.end()));
  const std::string source =
      fmt::format("memory snapshots for rank {} at step {} ({})", me, set.step, store.dir().string());
  SnapshotHeader header;
  try {
    header = restore_snapshots(snapshots, t, source, experts_too);
  } catch (const CheckpointError& e) {
    spdlog::warn("memory snapshots: {}", e.what());
    totals[3] = 1;
  }
  for (const std::string& s : snapshots) totals[2] += static_cast<int64_t>(s.size());
  world.all_reduce(totals, 4).wait();
  if (totals[3] > 0) {
    if (me == 0)
      spdlog::warn("memory snapshots: the set of step {} could not be restored; loading the storage checkpoint",
                   set.step);
    return std::nullopt;
  }
  if (me == 0)
    spdlog::info("MEMORY_RESTORE step={} source=memory ranks={} read_local={} fetched={} bytes={} seconds={:.3f}{}",
                 set.step, n, totals[0], totals[1], totals[2],
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                 same ? "" : fmt::format(" resharded_from_dp={} dp={}", was.dp, now.dp));
  return CheckpointMeta{header.state, "", header.layout_json};
}

}  // namespace megatrain
