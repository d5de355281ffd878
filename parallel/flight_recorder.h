// The flight recorder (docs/robustness.md R02; PyTorch's NCCL flight recorder): a ring of this
// process's most recent communication operations, every communicator's. Comm records each
// operation when it is issued and when it completes; the watchdog dumps the ring when the job
// hangs, and `megatrain diagnose` lines the ranks' dumps up to name the rank that did not arrive.
//
// Numbering: a group's collectives are numbered 0, 1, 2, … in issue order (`seq`), the same on
// every member by Comm's rule 1; point-to-point operations are numbered per (group, peer,
// direction), so this rank's k-th send to a peer meets that peer's k-th receive from it.
// Process-wide and thread-safe (the progress threads complete operations).
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace megatrain {

struct FlightGroup {
  std::string name;
  std::vector<int> members;  // world ranks, in group-rank order
};

enum class FlightState { in_flight, done, failed };

struct FlightRecord {
  int64_t id = 0;     // issue order in this process
  int group = 0;      // index into the snapshot's groups
  int64_t seq = 0;    // collectives: the group's collective number; send/recv: the number per peer and direction
  std::string op;     // "all_reduce", "send", …
  int64_t count = 0;  // elements (sum of counts for the v-collectives)
  std::string dtype;  // "f32", …
  int peer = -1;      // send/recv: the peer's group rank; -1 for collectives
  double t_issue = 0.0, t_end = -1.0;  // seconds on this process's steady clock; t_end < 0 while in flight
  FlightState state = FlightState::in_flight;
};

struct FlightSnapshot {
  std::vector<FlightGroup> groups;
  std::vector<FlightRecord> records;  // oldest first
  int64_t completed = 0;              // operations completed since the process started
  double now = 0.0;                   // the steady clock when the snapshot was taken
};

class FlightRecorder {
 public:
  static FlightRecorder& instance();

  // The ring's length (default 2000); shrinking drops the oldest records.
  void set_capacity(size_t entries);
  // A communicator's members; returns the group index its records carry.
  int add_group(std::string name, std::vector<int> members);
  // An operation issued on `group`: `peer` ≥ 0 for send/recv (`is_send` tells which). Returns the
  // record id that complete() takes.
  int64_t issue(int group, const char* op, int64_t count, const char* dtype, int peer = -1, bool is_send = false);
  void complete(int64_t id, bool ok);

  FlightSnapshot snapshot() const;
  // The records from id `next` on that have ended, up to the first still in flight (or dropped from
  // the ring); `next` moves past them. For a timeline that emits each operation once.
  std::vector<FlightRecord> ended_since(int64_t& next) const;
  std::string group_name(int group) const;
  // Operations completed so far, and the steady-clock time (seconds) of the latest completion or
  // issue: the watchdog's evidence of progress. Lock-free.
  int64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  double last_activity() const { return last_activity_.load(std::memory_order_relaxed); }

  static double now();  // seconds on the steady clock

 private:
  FlightRecorder() = default;
  mutable std::mutex mu_;
  size_t capacity_ = 2000;
  std::vector<FlightGroup> groups_;
  std::vector<int64_t> group_seq_;                      // the next collective number per group
  std::map<std::tuple<int, int, bool>, int64_t> p2p_;   // (group, peer, is_send) → next number
  std::deque<FlightRecord> ring_;
  int64_t next_id_ = 0;
  std::atomic<int64_t> completed_{0};
  std::atomic<double> last_activity_{0.0};
};

}  // namespace megatrain
