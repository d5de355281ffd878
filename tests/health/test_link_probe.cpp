// health/link_probe.h judge_links: which ring pairs are slow and which hosts they are pinned on.
// Ranks 0..5 on hosts a, a, b, b, c, c unless said: pairs 0-1, 2-3, 4-5 inside hosts, 1-2, 3-4,
// 5-0 between them.
#include <gtest/gtest.h>

#include "health/link_probe.h"

namespace megatrain {
namespace {

constexpr double kBytes = 4e6;

// Ring samples with the given bandwidths in MB/s, pair k = (k, k + 1 mod n).
std::vector<LinkSample> ring(const std::vector<std::string>& hosts, const std::vector<double>& mb_s) {
  std::vector<LinkSample> out;
  const int n = static_cast<int>(hosts.size());
  for (int k = 0; k < static_cast<int>(mb_s.size()); ++k) {
    const int b = (k + 1) % n;
    const double bw = mb_s[static_cast<size_t>(k)] * 1e6;
    out.push_back({k, b, hosts[static_cast<size_t>(k)] != hosts[static_cast<size_t>(b)], kBytes / bw, bw, 1e-4, false});
  }
  return out;
}

const std::vector<std::string> kSix = {"a", "a", "b", "b", "c", "c"};

TEST(LinkProbe, ASlowHostLinkIsPinnedOnThatHostAlone) {
  auto s = ring(kSix, {3000, 4, 1500, 4, 1400, 1700});  // b's link: both of its inter-host pairs
  const LinkVerdict v = judge_links(s, kSix, 3.0, 0.0);
  EXPECT_EQ(v.hosts, std::vector<std::string>{"b"});
  EXPECT_EQ(v.ranks, (std::vector<int>{2, 3}));
  EXPECT_TRUE(s[1].slow && s[3].slow);
  EXPECT_FALSE(s[0].slow || s[2].slow || s[4].slow || s[5].slow);
}

TEST(LinkProbe, InsideAndBetweenHostsAreComparedSeparately) {
  // Shared memory inside a host is far faster than the network between them: no pair is slow.
  auto s = ring(kSix, {9000, 400, 8000, 350, 9500, 420});
  EXPECT_TRUE(judge_links(s, kSix, 3.0, 0.0).ok());
  // A slow pair inside host c blames c.
  s = ring(kSix, {9000, 400, 8000, 350, 90, 420});
  EXPECT_EQ(judge_links(s, kSix, 3.0, 0.0).hosts, std::vector<std::string>{"c"});
}

TEST(LinkProbe, ASlowPairBetweenTwoHostsCannotTellItsEnds) {
  const std::vector<std::string> two = {"a", "a", "b", "b"};
  auto s = ring(two, {3000, 4, 2500, 1500});  // 1-2 slow, 3-0 fast: each host has one of each
  EXPECT_EQ(judge_links(s, two, 3.0, 0.0).hosts, (std::vector<std::string>{"a", "b"}));
  // Every link between them slow leaves nothing to compare with: not judged.
  s = ring(two, {3000, 4, 2500, 5});
  EXPECT_TRUE(judge_links(s, two, 3.0, 0.0).ok());
}

TEST(LinkProbe, AOneRankPerHostRingPinsTheHostBetweenTwoSlowPairs) {
  const std::vector<std::string> three = {"a", "b", "c"};
  auto s = ring(three, {5, 5, 1600});
  const LinkVerdict v = judge_links(s, three, 3.0, 0.0);
  EXPECT_EQ(v.hosts, std::vector<std::string>{"b"});
  EXPECT_EQ(v.ranks, std::vector<int>{1});
}

TEST(LinkProbe, TheFloorKeepsSmallAbsoluteDelaysFromCounting) {
  // 10× slower, but 4 MB at 400 vs 4000 MB/s is 9 ms more: under a 20 ms floor, over a 5 ms one.
  auto s = ring(kSix, {9000, 4000, 8000, 400, 9500, 4200});
  EXPECT_TRUE(judge_links(s, kSix, 3.0, 0.020).ok());
  EXPECT_FALSE(judge_links(s, kSix, 3.0, 0.005).ok());
}

TEST(LinkProbe, ASecondProbeKeepsEachPairsFasterTransfer) {
  auto first = ring(kSix, {3000, 4, 1500, 4, 1400, 1700});
  judge_links(first, kSix, 3.0, 0.0);
  const auto again = ring(kSix, {1000, 1600, 1500, 5, 1200, 1700});  // 1-2 stalled in the first probe only
  keep_faster(first, again);
  EXPECT_DOUBLE_EQ(first[0].bandwidth, 3000e6);
  EXPECT_DOUBLE_EQ(first[1].bandwidth, 1600e6);
  EXPECT_DOUBLE_EQ(first[3].bandwidth, 5e6);
  EXPECT_DOUBLE_EQ(first[4].bandwidth, 1400e6);
  EXPECT_FALSE(first[1].slow);
  EXPECT_EQ(judge_links(first, kSix, 3.0, 0.0).hosts, (std::vector<std::string>{"b", "c"}));
}

TEST(LinkProbe, DescribeMarksSlowAndInterHostPairs) {
  auto s = ring({"a", "b", "c"}, {5, 5, 1600});
  judge_links(s, {"a", "b", "c"}, 3.0, 0.0);
  EXPECT_EQ(describe_links(s), "0-1 (inter-host): 5 MB/s 100 us SLOW; 1-2 (inter-host): 5 MB/s 100 us SLOW; "
                               "2-0 (inter-host): 1600 MB/s 100 us");
}

}  // namespace
}  // namespace megatrain
