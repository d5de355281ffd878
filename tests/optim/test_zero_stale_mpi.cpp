// ZeroState's delayed reductions ([Note: bounded staleness] in optim/zero_plan.h) on real ranks with
// known gradients: rank r writes g(t, r, i) = 1000·(t + 1) + 10·r + i into element i at step t, so
// every sum is an exact float. With max_staleness = s the gradients retired after step t are the
// sum over ranks of step t − s's (the first s steps retire nothing, the last s are drained at the
// end); at most s reductions can be in flight (one more step is an error); the s extra gradient
// buffers are counted in comm_buffers; and s = 0 reduces each step's own gradients in
// micro_batch_end as before.
#include <gtest/gtest.h>

#include <vector>

#include "optim/zero_state.h"

namespace megatrain {
namespace {

// Three units of 5, 7 and 4 floats, in buckets of at least 6 floats: two buckets.
std::vector<FlatRange> units() { return {{0, 5}, {5, 12}, {12, 16}}; }
constexpr int64_t kTotal = 16;

float g(int64_t t, int r, int64_t i) { return static_cast<float>(1000 * (t + 1) + 10 * r + i); }

float reduced(int64_t t, int p, int64_t i) {
  float sum = 0.0f;
  for (int r = 0; r < p; ++r) sum += g(t, r, i);
  return sum;
}

// One step's backward: units from the last down, each written then marked done.
void backward(ZeroState& z, int64_t t, int rank) {
  z.step_begin();
  z.micro_batch_begin(true);
  for (int u = 2; u >= 0; --u) {
    const FlatRange range = units()[static_cast<size_t>(u)];
    float* grads = z.unit_grads(u);
    for (int64_t i = range.begin; i < range.end; ++i) grads[i - range.begin] = g(t, rank, i);
    z.unit_grads_done(u);
  }
  z.micro_batch_end();
}

void expect_step(const ZeroState& z, int64_t t, int p, const std::string& what) {
  for (int64_t i = 0; i < kTotal; ++i)
    ASSERT_EQ(z.optimizer_grads()[i], reduced(t, p, i)) << what << ": element " << i << " is not step " << t << "'s";
}

class StaleReductions : public ::testing::TestWithParam<int> {};

TEST_P(StaleReductions, TheGradientsRetiredAfterStepTAreStepTMinusS) {
  const int s = GetParam();
  const Comm world = Comm::world();
  ZeroOptions opt;
  opt.bucket_floats = 6;
  opt.max_staleness = s;
  ZeroState z(units(), world, opt);
  ASSERT_EQ(z.buckets().size(), 2);
  EXPECT_EQ(z.memory().comm_buffers, s * kTotal * 4) << "the s in-flight gradient buffers";
  EXPECT_EQ(z.memory().grads, kTotal * 4);
  constexpr int64_t kSteps = 7;
  for (int64_t t = 0; t < kSteps; ++t) {
    backward(z, t, world.rank());
    if (s == 0) {
      expect_step(z, t, world.size(), "synchronous");
      continue;
    }
    z.defer_reduction();
    if (t < s) {
      EXPECT_EQ(z.reductions_in_flight(), t + 1);
      continue;
    }
    z.retire_reduction();
    EXPECT_EQ(z.reductions_in_flight(), s);
    expect_step(z, t - s, world.size(), "s = " + std::to_string(s) + " after step " + std::to_string(t));
  }
  for (int64_t t = kSteps - s; t < kSteps; ++t) {  // drained at the end
    z.retire_reduction();
    expect_step(z, t, world.size(), "drained");
  }
  EXPECT_EQ(z.reductions_in_flight(), 0);
}

class StaleLimit : public ::testing::TestWithParam<int> {};  // s > 0: s = 0 defers nothing

TEST_P(StaleLimit, AStepBeyondSInFlightIsAnError) {
  const int s = GetParam();
  const Comm world = Comm::world();
  ZeroOptions opt;
  opt.bucket_floats = 6;
  opt.max_staleness = s;
  ZeroState z(units(), world, opt);
  for (int64_t t = 0; t <= s; ++t) {
    backward(z, t, world.rank());
    z.defer_reduction();
  }
  EXPECT_THROW(z.step_begin(), Error) << s + 1 << " reductions in flight";
  z.discard_reductions();
  EXPECT_EQ(z.reductions_in_flight(), 0);
  backward(z, 9, world.rank());  // the buffers came back
  z.defer_reduction();
  z.retire_reduction();
  expect_step(z, 9, world.size(), "after a discard");
}

INSTANTIATE_TEST_SUITE_P(Staleness, StaleReductions, ::testing::Values(0, 1, 2, 4));
INSTANTIATE_TEST_SUITE_P(Staleness, StaleLimit, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace megatrain
