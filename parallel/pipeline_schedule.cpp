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

std::vector<PipeStep> schedule_zero_bubble(int stage, const PipeShape& shape) {
  check_shape(shape, stage);
  MT_CHECK(shape.chunks == 1, "the zero-bubble schedule runs one model chunk per rank, got {}", shape.chunks);
  const int p = shape.stages, m = shape.micro_batches;
  // Unit-cost play, one tick per step: done_at[kind][s][micro] is the tick a step ended (-1: not yet).
  enum { F, B, W };
  std::vector<std::vector<std::vector<int>>> done_at(3, std::vector<std::vector<int>>(
                                                            static_cast<size_t>(p), std::vector<int>(static_cast<size_t>(m), -1)));
  const auto at = [&](int kind, int s, int micro) -> int& {
    return done_at[static_cast<size_t>(kind)][static_cast<size_t>(s)][static_cast<size_t>(micro)];
  };
  std::vector<int> next_f(static_cast<size_t>(p), 0), next_b(static_cast<size_t>(p), 0), next_w(static_cast<size_t>(p), 0);
  std::vector<std::vector<PipeStep>> lists(static_cast<size_t>(p));
  for (int tick = 0, left = 3 * p * m; left > 0; ++tick) {
    const auto finished = [&](int kind, int s, int micro) { return at(kind, s, micro) >= 0 && at(kind, s, micro) <= tick; };
    for (int s = 0; s < p; ++s) {
      const auto si = static_cast<size_t>(s);
      const int f = next_f[si], b = next_b[si], w = next_w[si];
      int kind = -1, micro = 0;
      if (b < f && finished(s + 1 < p ? B : F, s + 1 < p ? s + 1 : s, b))
        kind = B, micro = b;
      else if (f < m && f - w < p - s && (s == 0 || finished(F, s - 1, f)))
        kind = F, micro = f;
      else if (w < b)
        kind = W, micro = w;
      if (kind < 0) continue;
      at(kind, s, micro) = tick + 1;
      ++(kind == F ? next_f : kind == B ? next_b : next_w)[si];
      lists[si].push_back({kind == F ? PipeOp::forward : kind == B ? PipeOp::backward : PipeOp::weight, micro, 0});
      --left;
    }
  }
  return lists[static_cast<size_t>(stage)];
}

std::string schedule_problem(const std::string& name, const PipeShape& s) {
  if (name == "gpipe" || name == "1f1b" || name == "zero_bubble")
    return s.chunks == 1 ? "" : fmt::format("the {} schedule runs one model chunk per rank; virtual_stages = {} "
                                            "needs pipeline_schedule = \"interleaved\"", name, s.chunks);
  if (name == "interleaved")
    return s.chunks == 1 || s.micro_batches % s.stages == 0
               ? ""
               : fmt::format("the interleaved schedule sends micro-batches through the model chunks in groups of "
                             "pp = {}, so the {} micro-batches per step must be a multiple of {}",
                             s.stages, s.micro_batches, s.stages);
  return fmt::format("unknown pipeline schedule \"{}\" (gpipe, 1f1b, interleaved or zero_bubble)", name);
}

std::vector<PipeStep> pipeline_schedule(const std::string& name, int stage, const PipeShape& shape) {
  const std::string problem = schedule_problem(name, shape);
  MT_CHECK(problem.empty(), "{}", problem);
  if (name == "gpipe") return schedule_gpipe(stage, shape);
  if (name == "1f1b") return schedule_1f1b(stage, shape);
  if (name == "zero_bubble") return schedule_zero_bubble(stage, shape);
  return schedule_interleaved(stage, shape);
}

bool splits_backward(const std::vector<PipeStep>& steps) {
  return std::any_of(steps.begin(), steps.end(), [](const PipeStep& s) { return s.op == PipeOp::weight; });
}

namespace {

const char* op_name(PipeOp op) {
  return op == PipeOp::forward ? "forward" : op == PipeOp::backward ? "backward" : "weight step";
}

// Every (forward | backward, micro-batch, chunk) once; with split backwards a W for each, after its B.
void check_list(const std::vector<PipeStep>& list, const PipeShape& shape, int stage) {
  const bool split = splits_backward(list);
  std::vector<PipeStep> sorted = list, want;
  for (PipeOp op : {PipeOp::forward, PipeOp::backward, PipeOp::weight}) {
    if (op == PipeOp::weight && !split) continue;
    for (int c = 0; c < shape.chunks; ++c)
      for (int i = 0; i < shape.micro_batches; ++i) want.push_back({op, i, c});
  }
  const auto key = [](const PipeStep& a) { return std::tuple(a.op, a.chunk, a.micro); };
  std::sort(sorted.begin(), sorted.end(), [&](const PipeStep& a, const PipeStep& b) { return key(a) < key(b); });
  MT_CHECK(sorted == want, "stage {}: the list must hold every (forward | backward{}, micro-batch, chunk) once", stage,
           split ? " | weight step" : "");
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].op != PipeOp::weight) continue;
    const PipeStep b{PipeOp::backward, list[i].micro, list[i].chunk};
    MT_CHECK(std::find(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i), b) != list.begin() + static_cast<std::ptrdiff_t>(i),
             "stage {}: the weight step of micro-batch {} (chunk {}) comes before its backward", stage, list[i].micro,
             list[i].chunk);
  }
}

// The executor's links are first-in first-out (parallel/pipeline_links.h): on each link and in each
// direction, the receiver must take the messages in the order the sender sends them. A message is
// named by (micro-batch, receiving virtual stage).
void check_link_order(const std::vector<std::vector<PipeStep>>& lists, const PipeShape& shape) {
  const int p = shape.stages, last = p * shape.chunks - 1;
  // [direction][sending stage]: the messages sent, and the messages the receiving stage takes.
  std::vector<std::vector<std::pair<int, int>>> sent[2], taken[2];
  for (auto* v : {&sent[0], &sent[1], &taken[0], &taken[1]}) v->resize(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s)
    for (const PipeStep& st : lists[static_cast<size_t>(s)]) {
      const int vs = st.chunk * p + s;
      if (st.op == PipeOp::forward) {
        if (vs < last) sent[0][static_cast<size_t>(s)].emplace_back(st.micro, vs + 1);
        if (vs > 0) taken[0][static_cast<size_t>((s + p - 1) % p)].emplace_back(st.micro, vs);
      } else if (st.op == PipeOp::backward) {
        if (vs > 0) sent[1][static_cast<size_t>(s)].emplace_back(st.micro, vs - 1);
        if (vs < last) taken[1][static_cast<size_t>((s + 1) % p)].emplace_back(st.micro, vs);
      }
    }
  for (int d = 0; d < 2; ++d)
    for (int s = 0; s < p; ++s) {
      const auto& a = sent[d][static_cast<size_t>(s)];
      const auto& b = taken[d][static_cast<size_t>(s)];
      const auto at = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
      MT_CHECK(at.first == a.end() && at.second == b.end(),
               "pipeline schedule: stage {} sends its {} messages in another order than stage {} takes them "
               "(message {}: micro-batch {} sent, micro-batch {} taken); the links are first-in first-out",
               s, d == 0 ? "forward" : "backward", (s + (d == 0 ? 1 : p - 1)) % p, at.first - a.begin(),
               at.first == a.end() ? -1 : at.first->first, at.second == b.end() ? -1 : at.second->first);
    }
}

}  // namespace

ScheduleStats simulate(const std::vector<std::vector<PipeStep>>& lists, const PipeShape& shape, const StepCosts& costs) {
  const int p = shape.stages, v = shape.chunks;
  MT_CHECK(static_cast<int>(lists.size()) == p, "{} lists for {} stages", lists.size(), p);
  for (int s = 0; s < p; ++s) check_list(lists[static_cast<size_t>(s)], shape, s);
  check_link_order(lists, shape);
  // done[(op, micro, virtual stage)] = the time the step ended.
  std::map<std::tuple<PipeOp, int, int>, double> done;
  const auto ready = [&](PipeOp op, int micro, int vs, double& at) {
    int from = -1;
    PipeOp need = op;
    if (op == PipeOp::forward && vs > 0) from = vs - 1;
    if (op == PipeOp::backward) std::tie(need, from) = vs + 1 < p * v ? std::pair{op, vs + 1} : std::pair{PipeOp::forward, vs};
    if (op == PipeOp::weight) std::tie(need, from) = std::pair{PipeOp::backward, vs};
    if (from < 0) return true;
    const auto it = done.find({need, micro, from});
    if (it == done.end()) return false;
    at = std::max(at, it->second);
    return true;
  };
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0.0), busy(static_cast<size_t>(p), 0.0);
  std::vector<int> held(static_cast<size_t>(p), 0);
  std::vector<bool> split(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) split[static_cast<size_t>(s)] = splits_backward(lists[static_cast<size_t>(s)]);
  ScheduleStats stats;
  stats.peak_held.assign(static_cast<size_t>(p), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const auto si = static_cast<size_t>(s);
      while (next[si] < lists[si].size()) {
        const PipeStep& st = lists[si][next[si]];
        double start = clock[si];
        const int vs = st.chunk * p + s;
        if (!ready(st.op, st.micro, vs, start)) break;
        const double cost = st.op == PipeOp::forward  ? costs.forward
                            : st.op == PipeOp::weight ? costs.weight_grad
                            : split[si]               ? costs.input_grad
                                                      : costs.input_grad + costs.weight_grad;
        clock[si] = start + cost;
        busy[si] += cost;
        done[{st.op, st.micro, vs}] = clock[si];
        const PipeOp frees = split[si] ? PipeOp::weight : PipeOp::backward;
        held[si] += st.op == PipeOp::forward ? 1 : st.op == frees ? -1 : 0;
        stats.peak_held[si] = std::max(stats.peak_held[si], held[si]);
        ++next[si];
        progress = true;
      }
    }
  }
  std::string stuck;
  double total_busy = 0.0;
  for (int s = 0; s < p; ++s) {
    const auto si = static_cast<size_t>(s);
    stats.makespan = std::max(stats.makespan, clock[si]);
    stats.idle.push_back(clock[si] - busy[si]);
    stats.busy.push_back(busy[si]);
    total_busy += busy[si];
    if (next[si] == lists[si].size()) continue;
    const PipeStep& st = lists[si][next[si]];
    stuck += fmt::format("; stage {} waits forever at step {} ({} of micro-batch {}, chunk {})", s, next[si],
                         op_name(st.op), st.micro, st.chunk);
  }
  MT_CHECK(stuck.empty(), "pipeline schedule deadlocks{}", stuck);
  stats.bubble = 1.0 - total_busy / (stats.makespan * p);
  return stats;
}

}  // namespace megatrain
