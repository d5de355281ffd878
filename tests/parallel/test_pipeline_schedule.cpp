// Pipeline schedules without MPI: every generator's lists, played by the simulator, finish (no
// deadlock) with every step once; GPipe and 1F1B take (m + p − 1) forward-plus-backward slots,
// a bubble of (p − 1)/(m + p − 1); GPipe holds all m micro-batches on every stage, 1F1B at most
// p − stage; the interleaved schedule with v chunks shrinks the bubble to (p − 1)/(v·m + p − 1)
// while holding no more than 1F1B's memory per chunk; a list in a deadlocking order is reported.
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
        const ScheduleStats st = simulate(lists("interleaved", shape), shape, 1.0 / v, 2.0 / v);
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
        for (const std::string name : {"gpipe", "1f1b", "interleaved"}) {
          const PipeShape shape{p, m, v};
          if (!schedule_problem(name, shape).empty()) continue;
          const ScheduleStats st = simulate(lists(name, shape), shape);
          EXPECT_GE(st.bubble, 0.0) << name << " p " << p << " m " << m << " v " << v;
          ++played;
        }
  EXPECT_GT(played, 1000);  // 768 of one chunk, 255 interleaved ones
}

TEST(PipelineSchedule, ShapesTheScheduleCannotRunAreNamed) {
  EXPECT_NE(schedule_problem("interleaved", {4, 6, 2}).find("multiple of 4"), std::string::npos);
  EXPECT_NE(schedule_problem("1f1b", {4, 8, 2}).find("interleaved"), std::string::npos);
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

}  // namespace
}  // namespace megatrain
