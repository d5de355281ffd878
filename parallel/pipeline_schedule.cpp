#include "parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "kernels/check.h"

namespace megatrain {
namespace {

void check_shape(const PipeShape& s, int stage) {
  MT_CHECK(s.stages >= 1 && s.micro_batches >= 1 && s.chunks >= 1 && stage >= 0 && stage < s.stages,
           "pipeline shape: stage {} of {} stages, {} micro-batches, {} chunks", stage, s.stages, s.micro_batches,
           s.chunks);
}

}  // namespace

std::vector<PipeStep> schedule_gpipe(int stage, const PipeShape& shape) {
  check_shape(shape, stage);
  MT_CHECK(shape.chunks == 1, "GPipe runs one model chunk per rank, got {}", shape.chunks);
  std::vector<PipeStep> out;
  for (int m = 0; m < shape.micro_batches; ++m) out.push_back({PipeOp::forward, m, 0});
  for (int m = 0; m < shape.micro_batches; ++m) out.push_back({PipeOp::backward, m, 0});
  return out;
}

std::vector<PipeStep> schedule_1f1b(int stage, const PipeShape& shape) {
  check_shape(shape, stage);
  MT_CHECK(shape.chunks == 1, "1F1B runs one model chunk per rank, got {} (use the interleaved schedule)",
           shape.chunks);
  const int m = shape.micro_batches, warmup = std::min(shape.stages - stage - 1, m);
  std::vector<PipeStep> out;
  for (int i = 0; i < warmup; ++i) out.push_back({PipeOp::forward, i, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({PipeOp::forward, warmup + i, 0});
    out.push_back({PipeOp::backward, i, 0});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({PipeOp::backward, i, 0});
  return out;
}

std::vector<PipeStep> schedule_interleaved(int stage, const PipeShape& shape) {
  check_shape(shape, stage);
  if (shape.chunks == 1) return schedule_1f1b(stage, shape);
  const std::string problem = schedule_problem("interleaved", shape);
  MT_CHECK(problem.empty(), "{}", problem);
  const int p = shape.stages, v = shape.chunks, total = shape.micro_batches * v;
  // Step k of a direction: micro-batches in groups of p go through chunk 0, 1, … (backward: the
  // last chunk first), group after group.
  const auto step = [&](PipeOp op, int k) {
    int chunk = (k % (p * v)) / p;
    if (op == PipeOp::backward) chunk = v - 1 - chunk;
    return PipeStep{op, (k / (p * v)) * p + k % p, chunk};
  };
  const int warmup = shape.micro_batches == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  std::vector<PipeStep> out;
  for (int k = 0; k < warmup; ++k) out.push_back(step(PipeOp::forward, k));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(step(PipeOp::forward, warmup + i));
    out.push_back(step(PipeOp::backward, i));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(step(PipeOp::backward, k));
  return out;
}

std::string schedule_problem(const std::string& name, const PipeShape& s) {
  if (name == "gpipe" || name == "1f1b")
    return s.chunks == 1 ? "" : fmt::format("the {} schedule runs one model chunk per rank; virtual_stages = {} "
                                            "needs pipeline_schedule = \"interleaved\"", name, s.chunks);
  if (name == "interleaved")
    return s.chunks == 1 || s.micro_batches % s.stages == 0
               ? ""
               : fmt::format("the interleaved schedule sends micro-batches through the model chunks in groups of "
                             "pp = {}, so the {} micro-batches per step must be a multiple of {}",
                             s.stages, s.micro_batches, s.stages);
  return fmt::format("unknown pipeline schedule \"{}\" (gpipe, 1f1b or interleaved)", name);
}

std::vector<PipeStep> pipeline_schedule(const std::string& name, int stage, const PipeShape& shape) {
  const std::string problem = schedule_problem(name, shape);
  MT_CHECK(problem.empty(), "{}", problem);
  if (name == "gpipe") return schedule_gpipe(stage, shape);
  if (name == "1f1b") return schedule_1f1b(stage, shape);
  return schedule_interleaved(stage, shape);
}

ScheduleStats simulate(const std::vector<std::vector<PipeStep>>& lists, const PipeShape& shape, double forward_cost,
                       double backward_cost) {
  const int p = shape.stages, v = shape.chunks, m = shape.micro_batches;
  MT_CHECK(static_cast<int>(lists.size()) == p, "{} lists for {} stages", lists.size(), p);
  for (int s = 0; s < p; ++s) {
    std::vector<PipeStep> sorted = lists[static_cast<size_t>(s)], want;
    for (PipeOp op : {PipeOp::forward, PipeOp::backward})
      for (int c = 0; c < v; ++c)
        for (int i = 0; i < m; ++i) want.push_back({op, i, c});
    const auto key = [](const PipeStep& a) { return std::tuple(a.op, a.chunk, a.micro); };
    std::sort(sorted.begin(), sorted.end(), [&](const PipeStep& a, const PipeStep& b) { return key(a) < key(b); });
    MT_CHECK(sorted == want, "stage {}: the list must hold every (forward | backward, micro-batch, chunk) once", s);
  }
  // done[(op, micro, virtual stage)] = the time the step ended.
  std::map<std::tuple<PipeOp, int, int>, double> done;
  const auto ready = [&](PipeOp op, int micro, int vs, double& at) {
    int from = -1;
    PipeOp need = op;
    if (op == PipeOp::forward && vs > 0) from = vs - 1;
    if (op == PipeOp::backward) std::tie(need, from) = vs + 1 < p * v ? std::pair{op, vs + 1} : std::pair{PipeOp::forward, vs};
    if (from < 0) return true;
    const auto it = done.find({need, micro, from});
    if (it == done.end()) return false;
    at = std::max(at, it->second);
    return true;
  };
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0.0);
  std::vector<int> held(static_cast<size_t>(p), 0);
  ScheduleStats stats;
  stats.peak_held.assign(static_cast<size_t>(p), 0);
  double busy = 0.0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const auto si = static_cast<size_t>(s);
      while (next[si] < lists[si].size()) {
        const PipeStep& st = lists[si][next[si]];
        double start = clock[si];
        const int vs = st.chunk * p + s;
        if (!ready(st.op, st.micro, vs, start)) break;
        const double cost = st.op == PipeOp::forward ? forward_cost : backward_cost;
        clock[si] = start + cost;
        busy += cost;
        done[{st.op, st.micro, vs}] = clock[si];
        held[si] += st.op == PipeOp::forward ? 1 : -1;
        stats.peak_held[si] = std::max(stats.peak_held[si], held[si]);
        ++next[si];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int s = 0; s < p; ++s) {
    const auto si = static_cast<size_t>(s);
    stats.makespan = std::max(stats.makespan, clock[si]);
    if (next[si] == lists[si].size()) continue;
    const PipeStep& st = lists[si][next[si]];
    stuck += fmt::format("; stage {} waits forever at step {} ({} of micro-batch {}, chunk {})", s, next[si],
                         st.op == PipeOp::forward ? "forward" : "backward", st.micro, st.chunk);
  }
  MT_CHECK(stuck.empty(), "pipeline schedule deadlocks{}", stuck);
  stats.bubble = 1.0 - busy / (stats.makespan * p);
  return stats;
}

}  // namespace megatrain
