// MEGATRAIN_FAULT (health/fault_plan.h): each kind parses with its defaults, rank "*" and step
// ranges select what they say, and every malformed value is an InputError naming the variable and
// what is wrong.
#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <string>
#include <vector>

#include "health/fault_plan.h"
#include "health/fault_random.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"

namespace megatrain {
namespace {

TEST(FaultPlan, EachKindParsesWithItsDefaults) {
  const FaultPlan p = FaultPlan::parse(
      "hang:rank=1:step=20;kill:rank=3:step=25;exc:rank=2:step=10;nan:rank=0:step=7..14:where=loss;"
      "slow:rank=*:ms=200:from_step=5:to_step=9;ckpt_crash:rank=0:step=30:phase=after_commit_before_latest;"
      "ckpt_slow:ms=3000");
  const Fault* hang = p.find(FaultKind::hang, 1, 20);
  ASSERT_NE(hang, nullptr);
  EXPECT_EQ(hang->detail, "sigstop");
  EXPECT_EQ(p.find(FaultKind::hang, 1, 21), nullptr);
  EXPECT_EQ(p.find(FaultKind::hang, 0, 20), nullptr);
  ASSERT_NE(p.find(FaultKind::kill, 3, 25), nullptr);
  EXPECT_EQ(p.find(FaultKind::kill, 3, 25)->sig, 9);
  ASSERT_NE(p.find(FaultKind::exc, 2, 10), nullptr);
  for (int64_t s = 7; s <= 14; ++s) ASSERT_NE(p.find(FaultKind::nan, 0, s), nullptr) << s;
  EXPECT_EQ(p.find(FaultKind::nan, 0, 6), nullptr);
  EXPECT_EQ(p.find(FaultKind::nan, 0, 15), nullptr);
  EXPECT_EQ(p.find(FaultKind::nan, 0, 7)->detail, "loss");
  EXPECT_EQ(p.find(FaultKind::nan, 0, 7)->element, "");  // where=grad: every gradient
  const Fault* one = FaultPlan::parse("nan:rank=1:step=2:element=last").find(FaultKind::nan, 1, 2);
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->detail, "grad");
  EXPECT_EQ(one->element, "last");
  for (int r = 0; r < 4; ++r) {  // rank * is every rank
    EXPECT_EQ(p.find(FaultKind::slow, r, 4), nullptr);
    ASSERT_NE(p.find(FaultKind::slow, r, 5), nullptr);
    EXPECT_EQ(p.find(FaultKind::slow, r, 9)->ms, 200);
    EXPECT_EQ(p.find(FaultKind::slow, r, 10), nullptr);
  }
  EXPECT_EQ(p.find(FaultKind::ckpt_crash, 0, 30)->detail, "after_commit_before_latest");
  ASSERT_NE(p.find(FaultKind::ckpt_slow, 3, 12345), nullptr);  // every save, every rank
  EXPECT_EQ(p.find(FaultKind::ckpt_slow, 3, 1)->ms, 3000);
  EXPECT_EQ(FaultPlan::parse("").find(FaultKind::kill, 0, 1), nullptr);
}

TEST(FaultPlan, SlowWithoutAnEndLastsAndHangAtStepZeroIsAllowed) {
  const FaultPlan p = FaultPlan::parse("slow:rank=1:ms=5;hang:rank=2:step=0:how=sleep");
  EXPECT_NE(p.find(FaultKind::slow, 1, 1), nullptr);
  EXPECT_NE(p.find(FaultKind::slow, 1, 1000000), nullptr);
  ASSERT_NE(p.find(FaultKind::hang, 2, 0), nullptr);
  EXPECT_EQ(p.find(FaultKind::hang, 2, 0)->detail, "sleep");
}

// every=K: a hiccup at steps A, A + K, … up to B; two ranks can hiccup out of phase.
TEST(FaultPlan, SlowEveryKStepsActsOnlyAtThoseSteps) {
  const FaultPlan p = FaultPlan::parse("slow:rank=0:ms=300:every=4;slow:rank=1:ms=300:from_step=3:to_step=11:every=4");
  std::vector<int64_t> rank0, rank1;
  for (int64_t step = 1; step <= 16; ++step) {
    if (p.find(FaultKind::slow, 0, step)) rank0.push_back(step);
    if (p.find(FaultKind::slow, 1, step)) rank1.push_back(step);
  }
  EXPECT_EQ(rank0, (std::vector<int64_t>{1, 5, 9, 13}));
  EXPECT_EQ(rank1, (std::vector<int64_t>{3, 7, 11}));
  EXPECT_EQ(p.find(FaultKind::slow, 0, 5)->ms, 300);
  EXPECT_EQ(p.find(FaultKind::slow, 0, 5)->every, 4);
}

TEST(FaultPlan, AFaultActsInItsAttemptOnly) {
  const std::string spec = "kill:rank=3:step=25;exc:rank=1:step=3:attempt=*;hang:rank=2:step=4:attempt=2";
  const FaultPlan first = FaultPlan::parse(spec, 1), second = FaultPlan::parse(spec, 2);
  EXPECT_NE(first.find(FaultKind::kill, 3, 25), nullptr);
  EXPECT_EQ(second.find(FaultKind::kill, 3, 25), nullptr) << "the restarted run is not killed again";
  EXPECT_NE(first.find(FaultKind::exc, 1, 3), nullptr);
  EXPECT_NE(second.find(FaultKind::exc, 1, 3), nullptr);
  EXPECT_EQ(first.find(FaultKind::hang, 2, 4), nullptr);
  EXPECT_NE(second.find(FaultKind::hang, 2, 4), nullptr);
  EXPECT_CONTAINS(test::input_error_of([] { FaultPlan::parse("exc:rank=0:step=1:attempt=0"); }),
                  "attempt must be ≥ 1 or *");
}

// A random hang freezes its rank at the step's start (how=sigstop) or inside a collective (how=freeze),
// each about half the time.
TEST(FaultPlan, RandomHangsFreezeAtTheStepStartOrInsideACollective) {
  RandomFaults faults({7, 1.0, {FaultKind::hang}}, 1);
  std::map<std::string, int> how;
  for (const Fault& f : faults.due(1000.0, 5, 4)) ++how[f.detail];
  ASSERT_EQ(how.size(), 2u);
  const int n = how["freeze"] + how["sigstop"];
  EXPECT_GT(n, 800);
  EXPECT_NEAR(how["freeze"], n / 2, n / 10);
}

// Random mode: every rank draws the same faults (kind and rank, in order) whatever its clock — a
// slower rank meets them at later steps, in the same order — and another launch draws others. The
// clock is given (1 ms or 1.3 ms a step), so the draws are the same on every machine.
TEST(FaultPlan, RandomModeDrawsTheSameFaultsOnEveryRankAndNewOnesPerLaunch) {
  const std::string spec = "random:seed=7:mtti_s=0.05:kinds=kill,hang,exc,slow,ckpt_crash,nan";
  EXPECT_NO_THROW(FaultPlan::parse(spec, 1));
  const RandomFaultSpec random{7, 0.05, {FaultKind::kill, FaultKind::hang, FaultKind::exc, FaultKind::slow,
                                          FaultKind::ckpt_crash, FaultKind::nan}};
  const auto draw = [&](int attempt, double step_s) {
    RandomFaults faults(random, attempt);
    std::vector<std::pair<int, int>> got;  // (kind, rank) of each fault, in the order drawn
    for (int64_t step = 1; step <= 600; ++step)
      for (const Fault& f : faults.due(static_cast<double>(step) * step_s, step, 4))
        got.emplace_back(static_cast<int>(f.kind), f.rank);
    return got;
  };
  const auto a = draw(1, 1e-3), b = draw(1, 1.3e-3), c = draw(2, 1e-3);
  ASSERT_GE(std::min({a.size(), b.size(), c.size()}), 3u);
  const size_t n = std::min(a.size(), b.size());
  EXPECT_EQ(std::vector(a.begin(), a.begin() + n), std::vector(b.begin(), b.begin() + n))
      << "the draws depend on the seed and the launch only";
  const size_t m = std::min(a.size(), c.size());
  EXPECT_NE(std::vector(a.begin(), a.begin() + m), std::vector(c.begin(), c.begin() + m));
  EXPECT_CONTAINS(test::input_error_of([] { FaultPlan::parse("random:seed=1:kinds=kill"); }),
                  "random needs seed, mtti_s and kinds");
  EXPECT_CONTAINS(test::input_error_of([] { FaultPlan::parse("random:seed=1:mtti_s=2:kinds=kill,ckpt_slow"); }),
                  "random kinds are kill, hang, exc, nan, slow and ckpt_crash, not \"ckpt_slow\"");
}

TEST(FaultPlan, MalformedValuesNameTheVariableAndTheProblem) {
  const auto error = [](const std::string& spec) { return test::input_error_of([&] { FaultPlan::parse(spec); }); };
  EXPECT_CONTAINS(error("boom:rank=1"), "MEGATRAIN_FAULT = \"boom:rank=1\": unknown kind \"boom\"");
  EXPECT_CONTAINS(error("hang:rank=1:step=2:color=red"), "hang takes the keys rank, step and optionally attempt, how, not \"color\"");
  EXPECT_CONTAINS(error("kill:rank=1"), "kill needs step");
  EXPECT_CONTAINS(error("exc:rank=x:step=1"), "rank = \"x\" is not an integer");
  EXPECT_CONTAINS(error("exc:rank=1:step=5x"), "step = \"5x\" is not an integer");
  EXPECT_CONTAINS(error("hang:rank=1:step=2:how=nap"), "how = \"nap\" is not one of sigstop, spin, sleep");
  EXPECT_CONTAINS(error("nan:rank=0:step=9..7"), "must be S or A..B");
  EXPECT_CONTAINS(error("exc:rank=0:step=0"), "must be S or A..B with 1 ≤ A ≤ B");
  EXPECT_CONTAINS(error("exc:rank=0:step=1:step=2"), "step is given twice");
  EXPECT_CONTAINS(error("exc:rank=0:step=1:extra_collective=2"), "extra_collective = \"2\" is not one of 0, 1");
  EXPECT_CONTAINS(error("exc:rank=0:step"), "\"step\" is not key=value");
  EXPECT_CONTAINS(error("kill:rank=0:step=1:sig=99"), "sig must be a signal number");
  EXPECT_CONTAINS(error("ckpt_crash:rank=0:step=1:phase=later"), "phase = \"later\" is not one of");
  EXPECT_CONTAINS(error("slow:rank=0:ms=-3"), "ms must be ≥ 0");
  EXPECT_CONTAINS(error("slow:rank=0:ms=3:every=0"), "every must be ≥ 1");
  EXPECT_CONTAINS(error("kill:rank=0:step=3:every=2"), "not \"every\"");
  EXPECT_CONTAINS(error("nan:rank=0:step=1:element=tail"), "element = \"tail\" is not one of first, middle, last");
  EXPECT_CONTAINS(error("nan:rank=0:step=1:where=loss:element=first"), "it needs where=grad");
}

}  // namespace
}  // namespace megatrain
