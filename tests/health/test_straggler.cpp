// Straggler scoring (health/straggler.h) on synthetic windows of 4 ranks: a slow rank is reported
// only after straggler_windows windows in a row, with its score, medians and last-arrival share;
// noise, a one-off hiccup (a SLOW_STEP event instead), a uniform slowdown and a gap below the
// floor are not reported; a rank slower than its own history is an INDIVIDUAL_DEGRADATION; and
// nvrx's recipe — Gauss(10, 3) ms against Gauss(15, 3) ms — is detected.
#include <gtest/gtest.h>

#include <random>

#include "health/straggler.h"

namespace megatrain {
namespace {

constexpr int kRanks = 4, kW = 10;

HealthOptions options() {
  HealthOptions o;
  o.straggler_window = kW;
  return o;
}

// One window: every rank computes `base` ms plus Gauss(0, jitter) noise, rank r adds extra[r]; each
// rank waits for the slowest (the others' waits absorb the difference).
struct Window {
  std::vector<std::vector<double>> compute, wait;
};
Window window(std::mt19937& rng, double base, double jitter, std::vector<double> extra = std::vector<double>(kRanks)) {
  std::normal_distribution<double> noise(0.0, jitter);
  Window w{std::vector<std::vector<double>>(kRanks), std::vector<std::vector<double>>(kRanks)};
  for (int i = 0; i < kW; ++i) {
    std::vector<double> c(kRanks);
    for (int r = 0; r < kRanks; ++r) c[static_cast<size_t>(r)] = std::max(0.1, base + noise(rng) + extra[static_cast<size_t>(r)]);
    const double slowest = *std::max_element(c.begin(), c.end());
    for (int r = 0; r < kRanks; ++r) {
      w.compute[static_cast<size_t>(r)].push_back(c[static_cast<size_t>(r)]);
      w.wait[static_cast<size_t>(r)].push_back(slowest - c[static_cast<size_t>(r)] + 0.5);
    }
  }
  return w;
}

std::vector<StragglerReport> feed(StragglerScorer& s, int64_t& step, const Window& w) {
  step += kW;
  return s.add_window(step, w.compute, w.wait);
}

TEST(StragglerScorer, ASlowRankIsReportedAfterTwoWindowsAndOnlyIt) {
  std::mt19937 rng(1);
  StragglerScorer s(options(), kRanks);
  int64_t step = 0;
  EXPECT_TRUE(feed(s, step, window(rng, 20, 1)).empty());
  EXPECT_TRUE(feed(s, step, window(rng, 20, 1, {0, 0, 0, 200})).empty()) << "one window is not enough";
  const auto r = feed(s, step, window(rng, 20, 1, {0, 0, 0, 200}));
  ASSERT_EQ(r.size(), 2u);  // slower than the others, and than itself before
  EXPECT_EQ(r[1].kind, "INDIVIDUAL_DEGRADATION");
  EXPECT_EQ(r[1].rank, 3);
  EXPECT_EQ(r[0].kind, "STRAGGLER");
  EXPECT_EQ(r[0].rank, 3);
  EXPECT_EQ(r[0].step, 30);
  EXPECT_EQ(r[0].windows, 2);
  EXPECT_NEAR(r[0].score, 20.0 / 220.0, 0.02);
  EXPECT_NEAR(r[0].median_ms, 220.0, 3.0);
  EXPECT_NEAR(r[0].best_ms, 20.0, 3.0);
  EXPECT_EQ(r[0].last_arrival, 1.0);
  EXPECT_TRUE(feed(s, step, window(rng, 20, 1)).empty()) << "recovered";
}

TEST(StragglerScorer, NoiseHiccupsUniformSlownessAndSmallGapsAreNotReported) {
  std::mt19937 rng(2);
  StragglerScorer s(options(), kRanks);
  int64_t step = 0;
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(feed(s, step, window(rng, 15, 3)).empty()) << "noise, window " << i;
  Window hiccup = window(rng, 15, 1);
  hiccup.compute[1][4] += 300;  // step step + 5 of rank 1
  const auto r = feed(s, step, hiccup);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, "SLOW_STEP");
  EXPECT_EQ(r[0].rank, 1);
  EXPECT_EQ(r[0].step, step - kW + 5);
  EXPECT_NEAR(r[0].step_ms, 315.0, 3.0);
  StragglerScorer uniform(options(), kRanks);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(feed(uniform, step, window(rng, 15, 1, {50, 50, 50, 50})).empty());
  StragglerScorer small(options(), kRanks);  // 3 ms on 4 ms steps: a score of 0.57, but under the 5 ms floor
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(feed(small, step, window(rng, 4, 0.2, {0, 0, 3, 0})).empty());
}

TEST(StragglerScorer, ARankSlowerThanItsOwnPastIsAnIndividualDegradation) {
  std::mt19937 rng(3);
  StragglerScorer s(options(), kRanks);
  int64_t step = 0;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(feed(s, step, window(rng, 20, 1)).empty());
  // Every rank slows down alike (no relative straggler), rank 0 the most.
  EXPECT_TRUE(feed(s, step, window(rng, 20, 1, {60, 50, 50, 50})).empty());
  const auto r = feed(s, step, window(rng, 20, 1, {60, 50, 50, 50}));
  ASSERT_EQ(r.size(), 4u);  // all four degraded against their own best
  for (const auto& x : r) EXPECT_EQ(x.kind, "INDIVIDUAL_DEGRADATION");
  EXPECT_NEAR(r[0].score, 20.0 / 80.0, 0.03);
  EXPECT_NEAR(r[0].best_ms, 20.0, 2.0);
}

TEST(StragglerScorer, NvrxRecipeTenAgainstFifteenMillisecondsIsDetected) {
  std::mt19937 rng(4);
  HealthOptions o = options();
  o.straggler_window = 50;
  StragglerScorer s(o, kRanks);
  std::normal_distribution<double> fast(10, 3), slow(15, 3);
  int64_t step = 0;
  std::vector<StragglerReport> r;
  for (int win = 0; win < 2; ++win) {
    std::vector<std::vector<double>> c(kRanks), w(kRanks);
    for (int i = 0; i < 50; ++i)
      for (int k = 0; k < kRanks; ++k) {
        c[static_cast<size_t>(k)].push_back(k == 0 ? slow(rng) : fast(rng));
        w[static_cast<size_t>(k)].push_back(1.0);
      }
    step += 50;
    r = s.add_window(step, c, w);
  }
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, "STRAGGLER");
  EXPECT_EQ(r[0].rank, 0);
}

}  // namespace
}  // namespace megatrain
