// Memory snapshots (checkpoint/memory_snapshot.h, checkpoint/memory_store.h): a rank's state
// round-trips through its bytes exactly; a damaged, truncated or foreign snapshot is refused with a
// CheckpointError naming what is wrong; the store lists only committed steps, with the ranks whose
// snapshots it holds, and prunes old and half-written sets.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "checkpoint/memory_snapshot.h"
#include "checkpoint/memory_store.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

// A rank's two pieces (dense and experts), ZeRO-1-like: full params, partition-only moments.
struct RankState {
  std::vector<float> p0 = std::vector<float>(10), m0 = std::vector<float>(4), v0 = std::vector<float>(4);
  std::vector<float> p1 = std::vector<float>(6), m1 = std::vector<float>(3), v1 = std::vector<float>(3);
  explicit RankState(float first) {
    float x = first;
    for (auto* b : {&p0, &m0, &v0, &p1, &m1, &v1})
      for (float& f : *b) f = (x += 0.37f);
  }
  CheckpointTensors tensors() {
    return CheckpointTensors(nullptr, nullptr,
                             {{{p0.data(), 0, 10}, {m0.data(), 4, 8}, {v0.data(), 4, 8}, 4, 8, 0},
                              {{p1.data(), 10, 16}, {m1.data(), 13, 16}, {v1.data(), 13, 16}, 13, 16, 10}});
  }
  bool operator==(const RankState&) const = default;
};

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

TEST(MemorySnapshot, ARanksStateRoundTripsExactly) {
  RankState a(1.0f), b(-5.0f);
  const std::string bytes = encode_snapshot(a.tensors(), header());
  ASSERT_FALSE(a == b);
  const SnapshotHeader h = restore_snapshot(bytes, b.tensors(), "test");
  EXPECT_TRUE(a == b);
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
  // 8 magic + 4 + 4 + 8 + 15 layout + 56 state + 8 pieces + 2 × (24 + 3 × 16) + 4 × (10+4+4+6+3+3) + 4 CRC.
  EXPECT_EQ(bytes.size(), 8u + 4 + 4 + 8 + 15 + 56 + 8 + 2 * (24 + 3 * 16) + 4 * 30 + 4);
}

TEST(MemorySnapshot, DamageTruncationAndAnotherLayoutAreRefused) {
  RankState a(1.0f), b(0.0f);
  std::string bytes = encode_snapshot(a.tensors(), header());
  std::string flipped = bytes;
  flipped[100] ^= 0x10;
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshot(flipped, b.tensors(), "snap"); }), "snap: snapshot damaged");
  const std::string half = bytes.substr(0, bytes.size() / 2);
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshot(half, b.tensors(), "snap"); }), "snap: snapshot damaged");
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshot("not a snapshot", b.tensors(), "snap"); }),
                  "not a megatrain memory snapshot");
  CheckpointTensors other = b.tensors();
  other.pieces[1].exp_avg.begin = 12;  // another partition
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshot(bytes, other, "snap"); }), "another layout");
  other.pieces.pop_back();
  EXPECT_CONTAINS(checkpoint_error([&] { restore_snapshot(bytes, other, "snap"); }), "holds 2 pieces, this rank 1");
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
  EXPECT_EQ(store.bytes(), 2 * (3 + 4) + 16 + 2 * 2);  // snapshots, the half-written one, two markers "N\n"
  store.clear();
  EXPECT_TRUE(store.committed().empty());
  EXPECT_EQ(store.bytes(), 0);
}

TEST(MemoryStore, InventoriesRoundTripAsText) {
  const std::vector<StoredStep> steps = {{12, {0, 1, 6}}, {11, {0, 1}}};
  EXPECT_EQ(stored_steps_text(steps), "12:0,1,6;11:0,1");
  EXPECT_EQ(parse_stored_steps(stored_steps_text(steps)), steps);
  EXPECT_TRUE(parse_stored_steps("").empty());
}

}  // namespace
}  // namespace megatrain
