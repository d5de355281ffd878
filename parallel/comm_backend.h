// The backend interface behind Comm (MPI, NCCL) and the shared state of a Work.
// Invariant: every WorkState is finished exactly once (success or error) — by the backend, or by
// Comm when issuing it threw — so CommStats' in-flight interval always closes.
#pragma once
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/comm.h"

namespace megatrain {

// The counters behind Comm::stats(), shared by a communicator's copies and its Works.
class CommStatsCounter {
 public:
  void record_call(int64_t bytes);
  void op_started();   // an operation is in flight from now
  void op_finished();  // one in flight has completed
  void add_exposed(double ms);
  CommStats snapshot() const;
  void reset();

 private:
  using Clock = std::chrono::steady_clock;
  mutable std::mutex mu_;
  CommStats stats_;
  int in_flight_ = 0;
  Clock::time_point busy_since_;  // meaningful while in_flight_ > 0
};

struct WorkState {
  WorkState(std::string where, std::shared_ptr<CommStatsCounter> stats);
  // Marks the operation complete; `error` empty means success, else the full message thrown by
  // wait(). Only the first call counts.
  void finish(std::string error);

  int64_t flight_id = -1;   // its FlightRecorder record, completed by finish()
  const std::string where;  // "rank R group 'NAME': OPERATION", the start of an error message
  const std::shared_ptr<CommStatsCounter> stats;
  std::mutex mu;
  std::condition_variable cv;
  bool complete = false;
  std::string error;
  // Set at issue by a backend whose operation completes on a device stream (NCCL): Work::wait in
  // WaitMode::stream calls it instead of blocking the host. It orders the caller's stream after the
  // operation, or throws CommError for a failure the backend has detected. Empty: wait() blocks.
  std::function<void()> stream_wait;
};

class CommBackend {
 public:
  // `members`: the world ranks of the group, in group-rank order (registered with the FlightRecorder).
  CommBackend(int rank, int size, std::string name, std::vector<int> members);
  virtual ~CommBackend() = default;
  CommBackend(const CommBackend&) = delete;
  CommBackend& operator=(const CommBackend&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  const std::shared_ptr<CommStatsCounter>& stats() const { return stats_; }
  int flight_group() const { return flight_group_; }
  // "rank R group 'NAME': OP"
  std::string where(std::string_view op) const;

  virtual MPI_Comm mpi_handle() const = 0;
  virtual void set_stream(const Stream& stream) = 0;
  virtual int max_tag() const = 0;
  virtual std::shared_ptr<CommBackend> split(int color, int key, std::string name,
                                             const CommOptions& options) const = 0;

  // Each issues the operation of `w` (arguments already validated by Comm) and finishes `w` now
  // or later. Errors at issue are thrown as megatrain::Error.
  using WorkPtr = std::shared_ptr<WorkState>;
  virtual void all_reduce(const WorkPtr& w, void* data, int64_t n, ElemType t, ReduceOp op) = 0;
  virtual void reduce_scatter(const WorkPtr& w, void* out, const void* in, std::span<const int64_t> counts,
                              ElemType t) = 0;
  virtual void all_gather(const WorkPtr& w, void* out, const void* in, std::span<const int64_t> counts,
                          ElemType t) = 0;
  virtual void all_to_all(const WorkPtr& w, float* out, std::span<const int64_t> recv_counts, const float* in,
                          std::span<const int64_t> send_counts) = 0;
  virtual void broadcast(const WorkPtr& w, void* data, int64_t n, ElemType t, int root) = 0;
  virtual void send(const WorkPtr& w, const void* data, int64_t n, ElemType t, int peer, int tag) = 0;
  virtual void recv(const WorkPtr& w, void* data, int64_t n, ElemType t, int peer, int tag) = 0;
  virtual void send_recv(const WorkPtr& w, const void* send, void* recv, int64_t n, ElemType t, int to, int from,
                         int tag) = 0;
  virtual void barrier(const WorkPtr& w) = 0;
  [[noreturn]] virtual void abort(int code) const = 0;

 private:
  int rank_, size_;
  std::string name_;
  std::shared_ptr<CommStatsCounter> stats_;
  int flight_group_;
};

// The world ranks of `comm`'s `size` members, in its rank order (what a backend registers with the
// FlightRecorder).
std::vector<int> mpi_world_ranks(MPI_Comm comm, int size);

// The MPI backend (parallel/comm_mpi.cpp). With `owned`, MPI_Comm_free(comm) when it is destroyed.
std::shared_ptr<CommBackend> make_mpi_backend(MPI_Comm comm, bool owned, std::string name, const CommOptions& options);

}  // namespace megatrain
