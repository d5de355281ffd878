// Pipeline schedules without MPI: every generator's lists, played by the simulator, finish (no
// deadlock) with every step once; GPipe and 1F1B take (m + p − 1) forward-plus-backward slots,
// a bubble of (p − 1)/(m + p − 1); GPipe holds all m micro-batches on every stage, 1F1B at most
// p − stage; the interleaved schedule with v chunks shrinks the bubble to (p − 1)/(v·m + p − 1)
// while holding no more than 1F1B's memory per chunk; zero-bubble (ZB-H1) runs each W after its
// B, holds 1F1B's memory and, with equal F, B and W costs, idles (p − 1)(F + B − W) per stage
// against 1F1B's (p − 1)(F + B + W); a list in a deadlocking order is reported, and so is one that
// takes a neighbour's messages out of the order they are sent.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kernels/check.h"
#include "parallel/pipeline_schedule.h"

namespace megatrain {
namespace {

std::vector<std::vector<PipeStep>> lists(const std::string& name, const PipeShape& shape) {
  std::vector<std::vector<PipeStep>> out;
  for (int s = 0; s < shape.stages; ++s) out.push_back(pipeline_schedule(name, s, shape));
  return out;
}

TEST(PipelineSchedule, GpipeAnd1f1bHaveTheTextbookBubbleAndMemory) {
  for (int p : {1, 2, 3, 4})
    for (int m = 1; m <= 9; ++m) {
      const PipeShape shape{p, m, 1};
      const std::string where = "p " + std::to_string(p) + " m " + std::to_string(m);
      for (const std::string name : {"gpipe", "1f1b"}) {
        const ScheduleStats st = simulate(lists(name, shape), shape);
        EXPECT_DOUBLE_EQ(st.makespan, 3.0 * (m + p - 1)) << name << " " << where;
        EXPECT_NEAR(st.bubble, static_cast<double>(p - 1) / (m + p - 1), 1e-12) << name << " " << where;
        for (int s = 0; s < p; ++s)
          EXPECT_EQ(st.peak_held[static_cast<size_t>(s)], name == "gpipe" ? m : std::min(p - s, m))
              << name << " " << where << " stage " << s;
      }
    }
}

TEST(PipelineSchedule, InterleavedShrinksTheBubbleByTheChunkCount) {
  for (int p : {2, 4})
    for (int v : {2, 3})
      for (int m : {p, 2 * p, 4 * p}) {
        const PipeShape shape{p, m, v};
        const std::string where = "p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m);
        // Each chunk is 1/v of the model: forward 1/v, backward 2/v.
        const ScheduleStats st = simulate(lists("interleaved", shape), shape, {1.0 / v, 1.0 / v, 1.0 / v});
        EXPECT_NEAR(st.bubble, (p - 1.0) / (v * m + p - 1.0), 1e-9) << where;
        const ScheduleStats plain = simulate(lists("1f1b", {p, m, 1}), {p, m, 1});
        EXPECT_LT(st.bubble, plain.bubble) << where;
        for (int s = 0; s < p; ++s)
          EXPECT_LE(st.peak_held[static_cast<size_t>(s)], v * std::min(p, m) + p) << where << " stage " << s;
      }
}

// Up to 8 stages × 32 micro-batches × 4 chunks: every list holds each (F | B, micro-batch, chunk)
// once, so every send (a forward's output, a backward's input gradient) has its receive on the
// neighbouring virtual stage, and the simulator plays them to the end without deadlock.
TEST(PipelineSchedule, LargeShapesRunWithoutDeadlock) {
  int played = 0;
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m)
      for (int v = 1; v <= 4; ++v)
        for (const std::string name : {"gpipe", "1f1b", "interleaved", "zero_bubble"}) {
          const PipeShape shape{p, m, v};
          if (!schedule_problem(name, shape).empty()) continue;
          const ScheduleStats st = simulate(lists(name, shape), shape);
          EXPECT_GE(st.bubble, 0.0) << name << " p " << p << " m " << m << " v " << v;
          ++played;
        }
  EXPECT_GT(played, 1250);  // 3 × 256 of one chunk, 255 interleaved ones
}

// Zero-bubble (ZB-H1, Qi et al. 2024): each micro-batch's W comes after its B on the same stage,
// and no stage holds more micro-batches than under 1F1B (held until their W). With every step
// costing 1 the bubble per stage is (p − 1)(F + B) = 2(p − 1) time units against 1F1B's
// (p − 1)(F + B + W) = 3(p − 1): the input-gradient chain back through the stages no longer waits
// for weight gradients. That is the least this memory limit allows: the last stage holds one
// micro-batch, so it runs F B W in turn and its last B ends no earlier than (p − 1)F + 3m − W;
// the B chain then takes (p − 1)B to reach stage 0, which still has its last W to run. (The
// paper's (p − 1)(F + B − W) lets later stages hold more, deferring their W's too.)
TEST(PipelineSchedule, ZeroBubbleDefersWeightStepsIntoTheBubble) {
  for (int p : {1, 2, 3, 4, 6, 8})
    for (int m = 1; m <= 24; ++m) {
      const PipeShape shape{p, m, 1};
      const std::string where = "p " + std::to_string(p) + " m " + std::to_string(m);
      const auto zb = lists("zero_bubble", shape);
      for (int s = 0; s < p; ++s) {
        const auto& l = zb[static_cast<size_t>(s)];
        for (size_t i = 0; i < l.size(); ++i)
          if (l[i].op == PipeOp::weight) {
            const auto b = std::find(l.begin(), l.end(), PipeStep{PipeOp::backward, l[i].micro, 0});
            EXPECT_LT(b - l.begin(), static_cast<std::ptrdiff_t>(i)) << where << " stage " << s;
          }
      }
      const ScheduleStats z = simulate(zb, shape), f = simulate(lists("1f1b", shape), shape);
      for (int s = 0; s < p; ++s) {
        const auto si = static_cast<size_t>(s);
        EXPECT_LE(z.peak_held[si], f.peak_held[si]) << where << " stage " << s;
        if (m >= p) {
          EXPECT_DOUBLE_EQ(z.makespan - 3.0 * m, 2.0 * (p - 1)) << where;
        }
        EXPECT_DOUBLE_EQ(f.makespan - 3.0 * m, 3.0 * (p - 1)) << where;
      }
      if (p > 1) {
        EXPECT_LT(z.bubble, f.bubble) << where;
      }
    }
}

TEST(PipelineSchedule, AWeightStepBeforeItsBackwardIsRefused) {
  const PipeShape shape{1, 1, 1};
  EXPECT_THROW(simulate({{{PipeOp::forward, 0, 0}, {PipeOp::weight, 0, 0}, {PipeOp::backward, 0, 0}}}, shape), Error);
  EXPECT_NO_THROW(simulate({{{PipeOp::forward, 0, 0}, {PipeOp::backward, 0, 0}, {PipeOp::weight, 0, 0}}}, shape));
}

TEST(PipelineSchedule, ShapesTheScheduleCannotRunAreNamed) {
  EXPECT_NE(schedule_problem("interleaved", {4, 6, 2}).find("multiple of 4"), std::string::npos);
  EXPECT_NE(schedule_problem("1f1b", {4, 8, 2}).find("interleaved"), std::string::npos);
  EXPECT_NE(schedule_problem("zero_bubble", {4, 8, 2}).find("interleaved"), std::string::npos);
  EXPECT_NE(schedule_problem("zigzag", {4, 8, 1}).find("unknown pipeline schedule"), std::string::npos);
  EXPECT_EQ(schedule_problem("interleaved", {4, 8, 2}), "");
}

TEST(PipelineSchedule, ADeadlockingOrderIsReported) {
  const PipeShape shape{2, 2, 1};
  auto l = lists("1f1b", shape);
  // The last stage asks for micro-batch 1's forward before it has run micro-batch 0's backward,
  // while stage 0 (1F1B) only sends micro-batch 1 after receiving micro-batch 0's gradient.
  l[1] = {{PipeOp::backward, 0, 0}, {PipeOp::forward, 0, 0}, {PipeOp::forward, 1, 0}, {PipeOp::backward, 1, 0}};
  try {
    simulate(l, shape);
    ADD_FAILURE() << "no deadlock reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 waits forever at step 0"), std::string::npos) << e.what();
  }
  l[1].pop_back();
  EXPECT_THROW(simulate(l, shape), Error);  // a missing step
}

// The executor's links deliver a neighbour's messages first in, first out (parallel/pipeline_links.h),
// so a list that takes them in another order than they are sent is refused, even where matching by
// micro-batch would not deadlock: here stage 1 runs micro-batch 1's forward before micro-batch 0's
// while stage 0 (GPipe) sends micro-batch 0 first. (Every generated list passes this check: the
// schedules above are played through it.)
TEST(PipelineSchedule, ListsThatTakeMessagesOutOfOrderAreRefused) {
  const PipeShape shape{2, 2, 1};
  auto l = lists("gpipe", shape);
  l[1] = {{PipeOp::forward, 1, 0}, {PipeOp::forward, 0, 0}, {PipeOp::backward, 0, 0}, {PipeOp::backward, 1, 0}};
  try {
    simulate(l, shape);
    ADD_FAILURE() << "an out-of-order list was played";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 0 sends its forward messages in another order than stage 1 takes "
                                         "them (message 0: micro-batch 0 sent, micro-batch 1 taken)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace megatrain
