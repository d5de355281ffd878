// The caching allocator's policy (kernels/cuda/caching_allocator.h) over a fake device allocator:
// host memory with a capacity, counting what is live, so reuse, splitting, merging, per-stream
// pools, the out-of-memory retry and the stats are checked without a GPU.
#include "kernels/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

namespace megatrain::cuda {
namespace {

constexpr size_t MiB = size_t{1} << 20;

struct FakeDevice {
  size_t capacity = 64 * MiB;
  size_t live = 0;
  std::map<void*, size_t> blocks;

  RawAllocator raw() {
    return {[this](size_t bytes) -> void* {
              if (live + bytes > capacity) return nullptr;
              void* p = std::aligned_alloc(CachingAllocator::kRound, bytes);
              blocks[p] = bytes;
              live += bytes;
              return p;
            },
            [this](void* p) {
              auto it = blocks.find(p);
              ASSERT_NE(it, blocks.end()) << "freed a pointer the fake device never handed out";
              live -= it->second;
              blocks.erase(it);
              std::free(p);
            }};
  }
};

void* const s1 = reinterpret_cast<void*>(0x1);
void* const s2 = reinterpret_cast<void*>(0x2);

TEST(CachingAllocator, RoundsSizesUpTo512Bytes) {
  FakeDevice dev;
  CachingAllocator a(dev.raw());
  void* p = a.allocate(1, s1);
  void* q = a.allocate(513, s1);
  EXPECT_EQ(a.stats().allocated, 512 + 1024);
  EXPECT_EQ(a.allocate(0, s1), nullptr);
  a.deallocate(p);
  a.deallocate(q);
  a.deallocate(nullptr);
  EXPECT_EQ(a.stats().allocated, 0);
}

TEST(CachingAllocator, SmallRequestsAreCarvedFromOneSegment) {
  FakeDevice dev;
  CachingAllocator a(dev.raw());
  char* p = static_cast<char*>(a.allocate(1000, s1));
  char* q = static_cast<char*>(a.allocate(1000, s1));
  EXPECT_EQ(q, p + 1024);
  EXPECT_EQ(a.stats().device_mallocs, 1);
  EXPECT_EQ(a.stats().reserved, static_cast<int64_t>(CachingAllocator::kSmallSegment));
  a.deallocate(p);
  a.deallocate(q);
}

TEST(CachingAllocator, ReusesAFreedBlockWithoutCallingTheDevice) {
  FakeDevice dev;
  CachingAllocator a(dev.raw());
  void* p = a.allocate(3 * MiB, s1);
  a.deallocate(p);
  EXPECT_EQ(a.allocate(3 * MiB - 100, s1), p);
  EXPECT_EQ(a.stats().device_mallocs, 1);
}

TEST(CachingAllocator, SplitsALargeBlockAndMergesItBackOnFree) {
  FakeDevice dev;
  CachingAllocator a(dev.raw());
  char* whole = static_cast<char*>(a.allocate(8 * MiB, s1));
  a.deallocate(whole);
  char* x = static_cast<char*>(a.allocate(3 * MiB, s1));
  char* y = static_cast<char*>(a.allocate(3 * MiB, s1));
  EXPECT_EQ(x, whole);
  EXPECT_EQ(y, whole + 3 * MiB);
  EXPECT_EQ(a.stats().device_mallocs, 1);
  a.deallocate(x);  // free in either order: the pieces merge with both neighbours
  a.deallocate(y);
  EXPECT_EQ(a.allocate(8 * MiB, s1), whole);
  EXPECT_EQ(a.stats().device_mallocs, 1);
}

TEST(CachingAllocator, KeepsTheTailOfALargeBlockWhenTooSmallToSplit) {
  FakeDevice dev;
  CachingAllocator a(dev.raw());
  void* p = a.allocate(3 * MiB + 512, s1);  // segment 4 MiB: a tail under 1 MiB stays with the block
  EXPECT_EQ(a.stats().allocated, static_cast<int64_t>(4 * MiB));
  a.deallocate(p);
}

TEST(CachingAllocator, StreamsHaveSeparatePools) {
  FakeDevice dev;
  CachingAllocator a(dev.raw());
  void* p1 = a.allocate(4 * MiB, s1);
  a.deallocate(p1);
  void* p2 = a.allocate(4 * MiB, s2);
  EXPECT_NE(p2, p1);
  EXPECT_EQ(a.stats().device_mallocs, 2);
  EXPECT_EQ(a.allocate(4 * MiB, s1), p1);
  EXPECT_EQ(a.stats().device_mallocs, 2);
}

TEST(CachingAllocator, OutOfMemoryGivesTheCacheBackAndRetries) {
  FakeDevice dev;
  dev.capacity = 10 * MiB;
  CachingAllocator a(dev.raw());
  a.deallocate(a.allocate(8 * MiB, s1));  // cached on s1, useless to s2
  void* p = a.allocate(8 * MiB, s2);
  ASSERT_NE(p, nullptr);
  const AllocatorStats st = a.stats();
  EXPECT_EQ(st.oom_retries, 1);
  EXPECT_EQ(st.device_frees, 1);
  EXPECT_EQ(st.reserved, static_cast<int64_t>(8 * MiB));
  EXPECT_EQ(dev.live, 8 * MiB);
  a.deallocate(p);
}

TEST(CachingAllocator, OutOfMemoryAfterTheRetryNamesTheRequestAndTheStats) {
  FakeDevice dev;
  dev.capacity = 10 * MiB;
  CachingAllocator a(dev.raw());
  void* held = a.allocate(8 * MiB, s1);
  try {
    a.allocate(4 * MiB, s1);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("segment of 4.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("allocated 8.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("micro-batch"), std::string::npos) << msg;
  }
  EXPECT_EQ(a.stats().allocated, static_cast<int64_t>(8 * MiB));  // the failure changed nothing
  a.deallocate(held);
}

TEST(CachingAllocator, TracksPeaksAndReleasesTheCache) {
  FakeDevice dev;
  CachingAllocator a(dev.raw());
  void* x = a.allocate(4 * MiB, s1);
  void* y = a.allocate(4 * MiB, s1);
  a.deallocate(x);
  a.deallocate(y);
  AllocatorStats st = a.stats();
  EXPECT_EQ(st.allocated, 0);
  EXPECT_EQ(st.peak_allocated, static_cast<int64_t>(8 * MiB));
  EXPECT_EQ(st.reserved, static_cast<int64_t>(8 * MiB));
  a.release_cached();
  st = a.stats();
  EXPECT_EQ(st.reserved, 0);
  EXPECT_EQ(st.peak_reserved, static_cast<int64_t>(8 * MiB));
  EXPECT_EQ(dev.live, 0u);
  a.reset_peaks();
  EXPECT_EQ(a.stats().peak_allocated, 0);
}

TEST(CachingAllocator, FreeingAForeignPointerIsAnError) {
  FakeDevice dev;
  CachingAllocator a(dev.raw());
  int x = 0;
  EXPECT_THROW(a.deallocate(&x), Error);
}

TEST(CachingAllocator, DestructionGivesEverySegmentBack) {
  FakeDevice dev;
  {
    CachingAllocator a(dev.raw());
    a.allocate(100, s1);
    a.deallocate(a.allocate(5 * MiB, s2));
  }
  EXPECT_EQ(dev.live, 0u);
}

// Random allocations and frees on two streams: live blocks never overlap and stay inside the
// device's segments, allocated counts them (a large block may keep a tail of up to kSmallSize) and
// reserved equals what the device holds.
TEST(CachingAllocator, RandomWorkloadKeepsTheInvariants) {
  FakeDevice dev;
  dev.capacity = 256 * MiB;
  CachingAllocator a(dev.raw());
  std::mt19937 rng(7);
  struct Live {
    char* p;
    size_t size;
  };
  std::vector<Live> live;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || (live.size() < 50 && rng() % 2)) {
      const size_t bytes = rng() % 2 ? 1 + rng() % (256 * 1024) : 1 + rng() % (6 * MiB);
      live.push_back({static_cast<char*>(a.allocate(bytes, rng() % 2 ? s1 : s2)), bytes});
    } else {
      const size_t i = rng() % live.size();
      a.deallocate(live[i].p);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (step % 200 == 0) a.release_cached();
    std::vector<Live> sorted = live;
    std::sort(sorted.begin(), sorted.end(), [](const Live& x, const Live& y) { return x.p < y.p; });
    int64_t rounded = 0, tails = 0;
    for (size_t i = 0; i < sorted.size(); ++i) {
      rounded += static_cast<int64_t>(CachingAllocator::round_size(sorted[i].size));
      if (sorted[i].size > CachingAllocator::kSmallSize) tails += static_cast<int64_t>(CachingAllocator::kSmallSize);
      if (i > 0) {
        ASSERT_LE(sorted[i - 1].p + sorted[i - 1].size, sorted[i].p) << "overlap at step " << step;
      }
      auto seg = dev.blocks.upper_bound(sorted[i].p);
      ASSERT_NE(seg, dev.blocks.begin());
      --seg;
      ASSERT_LE(sorted[i].p + sorted[i].size, static_cast<char*>(seg->first) + seg->second);
    }
    const AllocatorStats st = a.stats();
    ASSERT_GE(st.allocated, rounded) << "step " << step;
    ASSERT_LE(st.allocated, rounded + tails) << "step " << step;
    ASSERT_EQ(st.reserved, static_cast<int64_t>(dev.live)) << "step " << step;
  }
  for (const Live& l : live) a.deallocate(l.p);
  a.release_cached();
  EXPECT_EQ(dev.live, 0u);
}

}  // namespace
}  // namespace megatrain::cuda
