#include "parallel/flight_recorder.h"

#include <algorithm>
#include <chrono>

namespace megatrain {

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder recorder;
  return recorder;
}

double FlightRecorder::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void FlightRecorder::set_capacity(size_t entries) {
  std::lock_guard lock(mu_);
  capacity_ = entries == 0 ? 1 : entries;
  while (ring_.size() > capacity_) ring_.pop_front();
}

int FlightRecorder::add_group(std::string name, std::vector<int> members) {
  std::lock_guard lock(mu_);
  groups_.push_back({std::move(name), std::move(members)});
  group_seq_.push_back(0);
  return static_cast<int>(groups_.size()) - 1;
}

int64_t FlightRecorder::issue(int group, const char* op, int64_t count, const char* dtype, int peer, bool is_send) {
  const double t = now();
  std::lock_guard lock(mu_);
  FlightRecord r;
  r.id = next_id_++;
  r.group = group;
  r.seq = peer < 0 ? group_seq_[static_cast<size_t>(group)]++ : p2p_[{group, peer, is_send}]++;
  r.op = op;
  r.count = count;
  r.dtype = dtype;
  r.peer = peer;
  r.t_issue = t;
  if (ring_.size() == capacity_) ring_.pop_front();
  ring_.push_back(std::move(r));
  last_activity_.store(t, std::memory_order_relaxed);
  return ring_.back().id;
}

void FlightRecorder::complete(int64_t id, bool ok) {
  const double t = now();
  std::lock_guard lock(mu_);
  completed_.fetch_add(1, std::memory_order_relaxed);
  last_activity_.store(t, std::memory_order_relaxed);
  if (ring_.empty() || id < ring_.front().id) return;  // already dropped from the ring
  FlightRecord& r = ring_[static_cast<size_t>(id - ring_.front().id)];
  r.t_end = t;
  r.state = ok ? FlightState::done : FlightState::failed;
}

std::vector<FlightRecord> FlightRecorder::ended_since(int64_t& next) const {
  std::lock_guard lock(mu_);
  std::vector<FlightRecord> out;
  if (ring_.empty()) return out;
  next = std::max(next, ring_.front().id);
  for (size_t i = static_cast<size_t>(next - ring_.front().id); i < ring_.size(); ++i) {
    if (ring_[i].state == FlightState::in_flight) break;
    out.push_back(ring_[i]);
    next = ring_[i].id + 1;
  }
  return out;
}

std::string FlightRecorder::group_name(int group) const {
  std::lock_guard lock(mu_);
  return groups_[static_cast<size_t>(group)].name;
}

FlightSnapshot FlightRecorder::snapshot() const {
  std::lock_guard lock(mu_);
  return {groups_, {ring_.begin(), ring_.end()}, completed_.load(), now()};
}

}  // namespace megatrain
