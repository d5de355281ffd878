#include "health/timeline.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "parallel/flight_recorder.h"

namespace megatrain {
namespace {

// Lanes (Chrome trace threads) of a rank: 0 = steps, then one per process group by name.
int lane_of(const std::string& group) {
  if (group == "tp") return 1;
  if (group == "pp") return 2;
  if (group == "dp") return 3;
  if (group == "world") return 4;
  return 5;
}

}  // namespace

Timeline::Timeline(const HealthOptions& opts, int rank, const std::string& host) : rank_(rank) {
  if (!opts.timeline || opts.run_dir.empty()) return;
  on_ = true;
  const auto dir = std::filesystem::path(opts.run_dir) / "timeline";
  std::filesystem::create_directories(dir);
  out_.open(dir / fmt::format("rank_{}.trace.json", rank), std::ios::trunc);
  const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  wall_minus_steady_ = wall - FlightRecorder::now();
  const FlightSnapshot now = FlightRecorder::instance().snapshot();
  next_op_ = now.records.empty() ? 0 : now.records.back().id + 1;
  buffer_ = "[\n";
  buffer_ += fmt::format(R"J({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"rank {} ({})"}}}},)J", rank, rank, host) + "\n";
  for (const auto& [tid, name] : {std::pair{0, "steps"}, {1, "tp"}, {2, "pp"}, {3, "dp"}, {4, "world"}, {5, "other"}})
    buffer_ += fmt::format(R"J({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}},)J", rank, tid, name) + "\n";
}

Timeline::~Timeline() {
  if (on_) flush();
}

void Timeline::step(int64_t step, double t_begin, double t_end, double compute_ms, double wait_ms) {
  if (!on_) return;
  const auto us = [&](double steady) { return (steady + wall_minus_steady_) * 1e6; };
  buffer_ += fmt::format(R"J({{"ph":"X","cat":"step","name":"step {}","pid":{},"tid":0,"ts":{:.1f},"dur":{:.1f},)J"
                         R"J("args":{{"compute_ms":{:.3f},"wait_ms":{:.3f}}}}},)J",
                         step, rank_, us(t_begin), (t_end - t_begin) * 1e6, compute_ms, wait_ms) + "\n";
  const FlightRecorder& fr = FlightRecorder::instance();
  for (const FlightRecord& r : fr.ended_since(next_op_)) {
    const std::string group = fr.group_name(r.group);
    buffer_ += fmt::format(R"J({{"ph":"X","cat":"comm","name":"{} {}","pid":{},"tid":{},"ts":{:.1f},"dur":{:.1f},)J"
                           R"J("args":{{"seq":{},"count":{},"dtype":"{}"}}}},)J",
                           r.op, group, rank_, lane_of(group), us(r.t_issue), (r.t_end - r.t_issue) * 1e6, r.seq,
                           r.count, r.dtype) + "\n";
  }
  if (++steps_ % 16 == 0) flush();
}

void Timeline::flush() {
  out_ << buffer_ << std::flush;
  buffer_.clear();
}

}  // namespace megatrain
