// Memory snapshots (checkpoint/memory_snapshot.h, checkpoint/memory_store.h): a dp group's
// partition-only snapshots restore every rank's state exactly; a damaged, truncated or foreign
// snapshot, or a group missing a rank, is refused with a CheckpointError naming what is wrong;
// snapshots of a larger dp re-shard into a smaller one; the
// store lists only committed steps, with the ranks whose snapshots it holds, prunes old and
// half-written sets and other layouts' once its own commits, rewrites a pruned step's files in
// place for the next snapshots, writes a snapshot through a mapping of its file, and forgets one
// host's snapshots from outside a job.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <array>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "checkpoint/memory_snapshot.h"
#include "checkpoint/memory_store.h"
#include "kernels/check.h"
#include "parallel/flat_range.h"
#include "tests/expect_contains.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

// The message of the CheckpointError `f` throws.
template <class F>
std::string checkpoint_error(F f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no CheckpointError";
}

SnapshotHeader header() {
  SnapshotHeader h{3, 8, R"({"tp":2,"dp":4})", {}};
  h.state = {24, 24 * 16, 1234, 2, 32768.0, 7, 1};
  return h;
}

// A model of `total` flat elements whose truth is value(kind, i), held by rank `rank` of `dp` with
// ZeRO stage 0 (everything full), 1 (full parameters, partition-only moments) or 3 (all
// partition-only), as one piece.
struct ShardedRank {
  static float value(int kind, int64_t i) { return static_cast<float>(kind * 1000 + i) * 0.25f; }
  FlatRange part;
  std::array<FlatRange, 3> held;  // params, exp_avg, exp_avg_sq
  std::vector<std::vector<float>> data;
  ShardedRank(int64_t total, int rank, int dp, int zero, bool filled) : part(flat_partition(total, rank, dp)) {
    const FlatRange all{0, total};
    held = {zero == 3 ? part : all, zero == 0 ? all : part, zero == 0 ? all : part};
    for (int kind = 0; kind < 3; ++kind) {
      const FlatRange r = held[static_cast<size_t>(kind)];
      auto& d = data.emplace_back(static_cast<size_t>(r.end - r.begin), -1.0f);
      for (int64_t i = r.begin; filled && i < r.end; ++i) d[static_cast<size_t>(i - r.begin)] = value(kind, i);
    }
  }
  CheckpointTensors tensors() {
    const auto slice = [&](int k) {
      return FlatSlice{data[static_cast<size_t>(k)].data(), held[static_cast<size_t>(k)].begin,
                       held[static_cast<size_t>(k)].end};
    };
    return CheckpointTensors(nullptr, nullptr, {{slice(0), slice(1), slice(2), part.begin, part.end, 0}});
  }
  bool holds_the_truth() const {
    for (int kind = 0; kind < 3; ++kind) {
      const FlatRange r = held[static_cast<size_t>(kind)];
      for (int64_t i = r.begin; i < r.end; ++i)
        if (data[static_cast<size_t>(kind)][static_cast<size_t>(i - r.begin)] != value(kind, i)) return false;
    }
    return true;
  }
};

// The snapshots of the 3 ranks of a dp group, each holding only its partition, restore every rank's
// parameters and moments exactly, whatever the ZeRO stage, with the header's state.
TEST(MemorySnapshot, ADpGroupsSnapshotsRestoreEveryRankExactly) {
  for (const int zero : {0, 1, 3}) {
    std::vector<std::string> group;
    for (int r = 0; r < 3; ++r) group.push_back(encode_snapshot(ShardedRank(31, r, 3, zero, true).tensors(), header()));
    // 8 magic + 4 + 4 + 8 + 15 layout + 56 state + 8 pieces + 24 piece + 3 × (16 + 11 floats) + 4 CRC.
    EXPECT_EQ(group[0].size(), 8u + 4 + 4 + 8 + 15 + 56 + 8 + 24 + 3 * (16 + 4 * 11) + 4) << "ZeRO " << zero;
    for (int r = 0; r < 3; ++r) {
      ShardedRank fresh(31, r, 3, zero, false);
      const SnapshotHeader h = restore_snapshots(group, fresh.tensors(), "test");
      EXPECT_TRUE(fresh.holds_the_truth()) << "ZeRO " << zero << " rank " << r;
      EXPECT_EQ(h.rank, 3);
      EXPECT_EQ(h.world, 8);
      EXPECT_EQ(h.layout_json, header().layout_json);
      EXPECT_EQ(h.state.step, 24);
      EXPECT_EQ(h.state.consumed_samples, 24 * 16);
      EXPECT_EQ(h.state.seed, 1234u);
      EXPECT_EQ(h.state.skipped_steps, 2);
      EXPECT_EQ(h.state.loss_scale, 32768.0);
      EXPECT_EQ(h.state.loss_scale_growth_tracker, 7);
      EXPECT_EQ(h.state.loss_scale_hysteresis_tracker, 1);
    }
  }
}

// [Note: dense pieces across ep] An MoE rank's state in two pieces: dense [0, 20) sharded over all
// 4 ranks (ep 2 × edp 2; ZeRO 1), experts [20, 32) over the 2 ranks of its ep coordinate, whose
// values differ by coordinate. Rank 0 (ep 0) restores from all four snapshots, the other
// coordinate's first: with experts_too its experts come only from ranks 0 and 2, and it holds the
// truth; without, rank 1's experts (another coordinate's) fill it first.
TEST(MemorySnapshot, AnMoeRankTakesItsDensePieceFromEveryEpRankAndItsExpertsFromItsOwn) {
  struct MoeRank {
    ShardedRank dense, experts;
    int ep;
    MoeRank(int rank, bool filled)
        : dense(20, rank, 4, 1, filled), experts(12, rank / 2, 2, 1, filled), ep(rank % 2) {
      for (auto& d : experts.data)
        for (float& x : d) x += filled ? 100.0f * static_cast<float>(ep) : 0.0f;
    }
    CheckpointTensors tensors() {
      CheckpointPiece a = dense.tensors().pieces[0], b = experts.tensors().pieces[0];
      for (FlatSlice* f : {&b.params, &b.exp_avg, &b.exp_avg_sq}) f->begin += 20, f->end += 20;
      b.part_begin += 20, b.part_end += 20, b.begin = 20;
      return CheckpointTensors(nullptr, nullptr, {a, b});
    }
  };
  std::vector<std::string> all;
  for (const int r : {1, 0, 3, 2}) all.push_back(encode_snapshot(MoeRank(r, true).tensors(), header()));
  MoeRank fresh(0, false);
  restore_snapshots(all, fresh.tensors(), "test", {false, true, false, true});
  EXPECT_TRUE(fresh.dense.holds_the_truth());
  EXPECT_TRUE(fresh.experts.holds_the_truth());  // ep 0: value + 0
  MoeRank mixed(0, false);
  restore_snapshots(all, mixed.tensors(), "test");
  EXPECT_FALSE(mixed.experts.holds_the_truth());
}

TEST(MemorySnapshot, DamageAndTruncationAreRefused) {
  const std::string bytes = encode_snapshot(ShardedRank(31, 0, 1, 1, true).tensors(), header());
  ShardedRank fresh(31, 0, 1, 1, false);
  std::string flipped = bytes;
  flipped[100] ^= 0x10;
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshots({flipped}, fresh.tensors(), "snap"); }),
                  "snap (snapshot 1 of 1): snapshot damaged");
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshots({bytes.substr(0, bytes.size() / 2)}, fresh.tensors(), "snap"); }),
                  "snapshot damaged");
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshots({"not a snapshot"}, fresh.tensors(), "snap"); }),
                  "not a megatrain memory snapshot");
  restore_snapshots({bytes}, fresh.tensors(), "snap");
  EXPECT_TRUE(fresh.holds_the_truth());
}

// The snapshots of dp = 3 ranks re-sharded into each rank of dp = 2 (a host lost): every element
// of the new partitions comes from the old rank that held it, for ZeRO 1 and 3, with 31 elements
// (uneven partitions); a set lacking a rank, or mixing steps, is refused naming what is missing.
TEST(MemorySnapshot, ThreeRanksSnapshotsReshardIntoTwo) {
  for (const int zero : {1, 3}) {
    std::vector<std::string> old;
    for (int r = 0; r < 3; ++r) old.push_back(encode_snapshot(ShardedRank(31, r, 3, zero, true).tensors(), header()));
    for (int k = 0; k < 2; ++k) {
      ShardedRank fresh(31, k, 2, zero, false);
      EXPECT_EQ(restore_snapshots(old, fresh.tensors(), "test").state.step, 24);
      EXPECT_TRUE(fresh.holds_the_truth()) << "ZeRO " << zero << " new rank " << k;
    }
    ShardedRank fresh(31, 1, 2, zero, false);  // [16, 31): old rank 1 holds [11, 22), rank 2 [22, 31)
    const std::vector<std::string> without_two = {old[0], old[1]};
    EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshots(without_two, fresh.tensors(), "snap"); }),
                    fmt::format("snap: the snapshots do not hold every element of [{}, 31) of this rank's "
                                "parameters; they hold [{}, 22)",
                                zero == 1 ? 0 : 16, zero == 1 ? 0 : 16));
  }
  SnapshotHeader later = header();
  later.state.step = 25;
  const std::vector<std::string> mixed = {encode_snapshot(ShardedRank(31, 0, 3, 1, true).tensors(), header()),
                                          encode_snapshot(ShardedRank(31, 1, 3, 1, true).tensors(), later)};
  ShardedRank fresh(31, 0, 2, 1, false);
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshots(mixed, fresh.tensors(), "snap"); }),
                  "snapshots of steps 24 and 25 cannot make one state");
}

TEST(MemoryStore, ListsOnlyCommittedStepsAndPrunes) {
  test::TempDir dir("memory_store");
  const MemoryStore store(dir.path(), "vnode1", R"({"tp":1})");
  const MemoryStore other_layout(dir.path(), "vnode1", R"({"tp":2})");
  for (int64_t step : {1, 2, 3, 4}) {
    store.put(step, 2, "two");
    store.put(step, 0, "zero");  // a buddy's copy
    if (step != 3) store.commit(step);
  }
  store.put(5, 2, "half-written set");
  EXPECT_EQ(store.committed(), (std::vector<StoredStep>{{4, {0, 2}}, {2, {0, 2}}, {1, {0, 2}}}));
  EXPECT_TRUE(other_layout.committed().empty());
  EXPECT_EQ(store.get(4, 0), "zero");
  EXPECT_CONTAINS(checkpoint_error([&] { store.get(4, 1); }), "rank_1.snap is missing");
  store.prune(2);
  EXPECT_EQ(store.committed(), (std::vector<StoredStep>{{4, {0, 2}}, {2, {0, 2}}}));
  EXPECT_FALSE(std::filesystem::exists(store.dir() / "step_0000003"));  // older than 4, never committed
  EXPECT_TRUE(std::filesystem::exists(store.dir() / "step_0000005"));   // newer: may still be being written
  // Snapshots, the half-written one, step 1's two kept as spares, two markers "N\n", LAYOUT.
  EXPECT_EQ(store.bytes(), 2 * (3 + 4) + 16 + (3 + 4) + 2 * 2 + 9);
  store.clear();
  EXPECT_TRUE(store.committed().empty());
  EXPECT_EQ(store.bytes(), 0);
}

// A host's folders of several layouts are listed with their layouts; once the newer layout commits
// a step, pruning removes the older layout's sets; clearing removes the host's folder whole.
TEST(MemoryStore, OtherLayoutsAreListedThenPrunedOnceThisOneCommits) {
  test::TempDir dir("memory_layouts");
  const MemoryStore old_layout(dir.path(), "vnode0", R"({"dp":3})"), now(dir.path(), "vnode0", R"({"dp":2})");
  old_layout.put(24, 0, "zero"), old_layout.commit(24);
  std::vector<std::string> seen;
  for (const MemoryStore& s : now.host_layouts()) seen.push_back(s.layout_json() + "@" + stored_steps_text(s.committed()));
  EXPECT_EQ(seen, std::vector<std::string>{R"({"dp":3}@24:0)"});
  now.put(25, 0, "zero");
  now.prune(2);  // nothing committed at this layout yet: the old one stays
  EXPECT_EQ(old_layout.committed().size(), 1u);
  now.commit(25);
  now.prune(2);
  EXPECT_TRUE(old_layout.committed().empty());
  EXPECT_EQ(now.host_layouts().size(), 1u);
  now.clear();
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "vnode0"));
}

// A pruned step's files are the ranks' spares, and the next snapshot of each rank is written into its
// spare — the same file (inode), rewritten and cut to the new length — instead of a fresh one.
TEST(MemoryStore, PrunedSnapshotsAreRewrittenInPlace) {
  test::TempDir dir("memory_spares");
  const MemoryStore store(dir.path(), "vnode0", R"({"dp":1})");
  const auto inode = [&](int64_t step, int rank) {
    struct stat st {};
    const std::string path = (store.dir() / fmt::format("step_{:07d}", step) / fmt::format("rank_{}.snap", rank)).string();
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_ino;
  };
  const std::string first = "the first snapshot, the longest", second = "second", third = "3", fourth(100, 'x');
  store.put(1, 0, first), store.commit(1), store.prune(1);
  const ino_t first_file = inode(1, 0);
  store.put(2, 0, second), store.commit(2), store.prune(1);  // step 1's file becomes rank 0's spare
  const ino_t second_file = inode(2, 0);
  EXPECT_EQ(store.bytes(), static_cast<int64_t>(first.size() + second.size()) + 2 + 9);  // + marker, LAYOUT
  store.put(3, 0, third);
  EXPECT_EQ(inode(3, 0), first_file);
  EXPECT_EQ(store.get(3, 0), third);  // cut to its length
  store.commit(3), store.prune(1);
  store.put(4, 0, fourth);
  EXPECT_EQ(inode(4, 0), second_file);
  EXPECT_EQ(store.get(4, 0), fourth);
  store.commit(4), store.prune(1);
  EXPECT_EQ(store.committed(), (std::vector<StoredStep>{{4, {0}}}));
  EXPECT_EQ(store.bytes(), static_cast<int64_t>(fourth.size() + third.size()) + 2 + 9);
}

// A snapshot is written where the store keeps it (trainer/memory_snapshots.h encodes into the
// mapping): what goes through write()'s mapping is in the file after finish(), and not before; a
// file that cannot be given its length (here: beyond RLIMIT_FSIZE) is a CheckpointError naming it.
TEST(MemoryStore, WritesASnapshotInPlaceThroughItsFile) {
  test::TempDir dir("memory_mapped");
  const MemoryStore store(dir.path(), "vnode0", R"({"dp":1})");
  const std::string bytes = "MTSNAP01 and the rest of a snapshot";
  MemoryStore::Writing w = store.write(7, 3, bytes.size());
  ASSERT_EQ(w.size(), bytes.size());
  std::memcpy(w.data(), bytes.data(), bytes.size());
  EXPECT_FALSE(std::filesystem::exists(store.dir() / "step_0000007" / "rank_3.snap"));  // not yet in the store
  w.finish();
  EXPECT_EQ(store.get(7, 3), bytes);

  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 1 << 16;
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string e = checkpoint_error([&] { store.write(8, 3, 1 << 20); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_CONTAINS(e, "step_0000008/rank_3.snap.tmp (1048576 bytes)");
}

// `megatrain checkpoint forget-memory`: one host's folder goes, the others stay, and the run's
// folder goes with the last; a folder holding anything but layouts is left whole. clear() too
// removes the run's folder once its host's was the last.
TEST(MemoryStore, ForgetRemovesOneHostsSnapshotsAndTheRunFolderWithTheLast) {
  namespace fs = std::filesystem;
  test::TempDir dir("memory_forget");
  const fs::path root = dir.path() / "run";
  const MemoryStore a(root, "vnode0", R"({"dp":2})"), b(root, "vnode1", R"({"dp":2})");
  for (const MemoryStore* s : {&a, &b}) {
    s->put(3, 0, "zero"), s->put(3, 1, "one!"), s->commit(3);
  }
  const int64_t held = b.bytes();
  EXPECT_EQ(MemoryStore::forget(root, "vnode1"), held);
  EXPECT_FALSE(fs::exists(root / "vnode1"));
  EXPECT_EQ(a.committed(), (std::vector<StoredStep>{{3, {0, 1}}}));
  EXPECT_EQ(MemoryStore::forget(root, "vnode7"), 0);
  { std::ofstream(root / "vnode0" / "notes.txt") << "mine"; }
  EXPECT_CONTAINS(checkpoint_error([&] { MemoryStore::forget(root, "vnode0"); }),
                  "vnode0/notes.txt is not one of its layouts: removed nothing");
  EXPECT_EQ(a.committed(), (std::vector<StoredStep>{{3, {0, 1}}}));
  fs::remove(root / "vnode0" / "notes.txt");
  EXPECT_EQ(MemoryStore::forget(root, "vnode0"), held);
  EXPECT_FALSE(fs::exists(root));
  const MemoryStore alone(root, "vnode0", R"({"dp":1})");
  alone.put(1, 0, "zero"), alone.commit(1);
  alone.clear();
  EXPECT_FALSE(fs::exists(root));
}

TEST(MemoryStore, InventoriesRoundTripAsText) {
  const std::vector<StoredStep> steps = {{12, {0, 1, 6}}, {11, {0, 1}}};
  EXPECT_EQ(stored_steps_text(steps), "12:0,1,6;11:0,1");
  EXPECT_EQ(parse_stored_steps(stored_steps_text(steps)), steps);
  EXPECT_TRUE(parse_stored_steps("").empty());
}

}  // namespace
}  // namespace megatrain
