// Comm: a communicator with asynchronous Work handles (PyTorch c10d style) — all-reduce,
// reduce-scatter, all-gather, all-to-all(v), broadcast, send/recv, barrier, split — in front of a
// backend interface (parallel/comm_backend.h); the MPI backend is parallel/comm_mpi.cpp, the NCCL
// backend parallel/comm_nccl.h (device buffers, ordered with the caller's CUDA stream).
//
// Rules for every user:
//  1. All ranks of a communicator issue the same collectives, with the same sizes (n, counts,
//     root), in the same order. Point-to-point messages between two ranks with the same tag match
//     in issue order.
//  2. Buffers passed to an operation must stay valid, and must not be touched (written, or read
//     for an output buffer), until wait() on its Work has returned. A Work that is never waited on
//     still completes, but its buffers must outlive the communicator.
//  3. An invalid argument raises megatrain::Error, an MPI error or a failed operation CommError,
//     with text "rank R group 'NAME': OPERATION failed: WHY". Invalid arguments throw at the call;
//     MPI errors throw at the call or from Work::wait() (and from every later wait()). After an MPI error the
//     communicator is unusable: the caller ends the job (main aborts the world). A communicator
//     destroyed while an exception unwinds abandons its operations in flight instead of waiting
//     for them (a peer that never arrives must not hang the unwinding).
//  4. The blocking barrier() is issue + wait on the same path, so it is
//     ordered with the asynchronous ones.
//
// Bytes moved, recorded per call in stats() (nccl-tests "bus bandwidth" convention, per rank;
// b = sizeof(T), p = size(), integer arithmetic evaluated exactly as written):
//   all_reduce                   2·(p−1)·S / p        S = n·b
//   reduce_scatter, all_gather   (p−1)·S / p          S = sum(counts)·b
//   all_to_all                   (sum(send_counts) − send_counts[rank()])·b
//   broadcast                    n·b on every rank when p > 1
//   send and send_recv n·b;  recv 0;  barrier 0;  every collective at p = 1: 0.
//
// Counts above INT_MAX elements work: Open MPI 4.1 has no MPI-4 large-count (_c) calls, so the
// backend splits an operation into calls of at most CommOptions::max_count elements each.
#pragma once
#include <mpi.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "kernels/check.h"
#include "kernels/device.h"

namespace megatrain {

// An MPI error or a failed communication (a peer lost, a broken link): the job cannot go on.
class CommError : public Error {
 public:
  using Error::Error;
};

// Initialises MPI (MPI_THREAD_MULTIPLE: progress threads and the checkpoint writer call MPI) for
// the lifetime of the object (a world of one is still a world).
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
};

enum class ReduceOp { sum, max };
enum class ElemType { f32, f64, i32, i64, u8, u16, bf16 };

// A bfloat16 value (kernels/half.h bits) as an element that collectives add: each addition is done
// in float32 and rounded back to bfloat16, as NCCL's bf16 sums are (sum only; the order of the
// additions is the MPI library's, so sums of three or more values depend on it).
struct Bf16 {
  uint16_t bits;
};

template <class T>
constexpr ElemType elem_type_of() {
  if constexpr (std::is_same_v<T, float>) return ElemType::f32;
  else if constexpr (std::is_same_v<T, double>) return ElemType::f64;
  else if constexpr (std::is_same_v<T, int32_t>) return ElemType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return ElemType::i64;
  else if constexpr (std::is_same_v<T, uint16_t>) return ElemType::u16;  // 16-bit float bits: moved, not summed
  else if constexpr (std::is_same_v<T, Bf16>) return ElemType::bf16;
  else {
    static_assert(std::is_same_v<T, uint8_t>, "Comm supports float, double, int32_t, int64_t, uint16_t, Bf16 and uint8_t");
    return ElemType::u8;
  }
}
int64_t elem_size(ElemType t);
const char* elem_type_name(ElemType t);  // "f32", "bf16", …

struct WorkState;  // parallel/comm_backend.h

// What Work::wait() waits for. On a device backend (NCCL) `stream` orders the communicator's
// current stream (Comm::set_stream) after the operation and returns without blocking the host, as
// c10d's Work::wait does; `host` blocks until the operation has completed on the device. An
// operation on host buffers (every MPI operation) blocks the host either way.
enum class WaitMode { stream, host };

// The handle of one issued operation. Copies share it; a default-constructed Work is complete.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}
  // Waits as `mode` says; the blocked time is added to stats().exposed_ms. Throws
  // megatrain::Error naming rank, group and operation if it failed (on every call).
  void wait(WaitMode mode = WaitMode::stream) const;
  bool done() const;  // non-blocking

 private:
  std::shared_ptr<WorkState> state_;
};

// Per communicator, shared by copies of a Comm; reads are thread-safe snapshots.
struct CommStats {
  int64_t bytes_moved = 0;  // the formula at the top of this file, summed over calls
  int64_t calls = 0;
  double busy_ms = 0;     // wall time at least one operation was in flight (overlaps counted once)
  double exposed_ms = 0;  // time callers spent blocked: issuing operations, in Work::wait() and in blocking calls
  CommStats& operator+=(const CommStats& o) {  // totals over several periods
    bytes_moved += o.bytes_moved;
    calls += o.calls;
    busy_ms += o.busy_ms;
    exposed_ms += o.exposed_ms;
    return *this;
  }
};

struct CommOptions {
  // The largest element count given to one MPI call; larger operations are split. Tests lower it
  // to exercise the split path with small buffers.
  int64_t max_count = INT_MAX;
  // How long the progress thread sleeps between polls of the operations in flight.
  int progress_poll_us = 50;
};

class CommBackend;  // parallel/comm_backend.h

// A cheap copyable handle; copies share the underlying communicator, progress thread and stats.
class Comm {
 public:
  // Wraps `comm` (not owned; its error handler is set to MPI_ERRORS_RETURN).
  Comm(MPI_Comm comm, std::string name);
  // A communicator on `backend` (parallel/comm_backend.h): how the NCCL backend becomes a Comm.
  explicit Comm(std::shared_ptr<CommBackend> backend) : backend_(std::move(backend)) {}
  // MPI_COMM_WORLD; every call made while a copy is alive returns the same shared communicator.
  static Comm world();

  // Collective over every rank of this communicator: ranks passing the same `color` form one new
  // communicator (owned, freed with its last copy), ranked by `key` (ties by rank here).
  Comm split(int color, int key, std::string name) const;
  Comm split(int color, int key, std::string name, const CommOptions& options) const;
  // The raw communicator, for libraries that take one (MPI-IO through HDF5); on the NCCL backend the
  // MPI communicator of the same ranks that carries its host exchanges.
  MPI_Comm handle() const;

  // The stream the caller's work runs on (kernels/device.h), shared by this communicator's copies
  // and inherited by communicators split from it. A device operation starts after the work
  // enqueued on it before the call, and Work::wait() makes it wait for the operation. Default:
  // Stream::cpu() on the MPI backend, which takes CPU streams only; the CUDA default stream on
  // NCCL. Set it before issuing operations, from the thread that issues them.
  void set_stream(const Stream& stream) const;

  int rank() const;
  int size() const;
  const std::string& name() const;

  template <class T>
  Work all_reduce(T* data, int64_t n, ReduceOp op = ReduceOp::sum) const {  // in place
    return all_reduce_raw(data, n, elem_type_of<T>(), op);
  }
  // in: sum(counts) elements (float or Bf16) in rank order; out: counts[rank()], the element-wise
  // sum over ranks of this rank's part. `in` and `out` must not overlap.
  template <class T>
  Work reduce_scatter(T* out, const T* in, std::span<const int64_t> counts) const {
    return reduce_scatter_raw(out, in, counts, elem_type_of<T>());
  }
  // in: counts[rank()] elements; out: sum(counts) in rank order. In place when
  // in == out + (sum of counts before rank()); otherwise they must not overlap.
  template <class T>
  Work all_gather(T* out, const T* in, std::span<const int64_t> counts) const {
    return all_gather_raw(out, in, counts, elem_type_of<T>());
  }
  // send_counts[j] floats to rank j, concatenated in `in`; recv_counts[j] from rank j,
  // concatenated in `out` (which must not overlap `in`).
  Work all_to_all(float* out, std::span<const int64_t> recv_counts, const float* in,
                  std::span<const int64_t> send_counts) const;
  template <class T>
  Work broadcast(T* data, int64_t n, int root) const {
    return broadcast_raw(data, n, elem_type_of<T>(), root);
  }
  // Tags lie in [0, max_tag()].
  template <class T>
  Work send(const T* data, int64_t n, int peer, int tag) const {
    return send_raw(data, n, elem_type_of<T>(), peer, tag);
  }
  template <class T>
  Work recv(T* data, int64_t n, int peer, int tag) const {
    return recv_raw(data, n, elem_type_of<T>(), peer, tag);
  }
  // n elements of `send` to rank `to` and n from rank `from` into `recv`, as one operation (one NCCL
  // group: a ring of them, each rank sending on and receiving from behind, completes on NCCL too).
  template <class T>
  Work send_recv(const T* send, T* recv, int64_t n, int to, int from, int tag) const {
    return send_recv_raw(send, recv, n, elem_type_of<T>(), to, from, tag);
  }
  int max_tag() const;
  Work barrier_async() const;

  void barrier() const;  // blocking

  CommStats stats() const;   // snapshot
  void reset_stats() const;  // zero the counters (the trainer calls this once per step)

  // Ends every rank of the job; used by main() after an error so no peer waits forever.
  [[noreturn]] void abort(int code) const;

 private:
  Work all_reduce_raw(void* data, int64_t n, ElemType t, ReduceOp op) const;
  Work all_gather_raw(void* out, const void* in, std::span<const int64_t> counts, ElemType t) const;
  Work reduce_scatter_raw(void* out, const void* in, std::span<const int64_t> counts, ElemType t) const;
  Work broadcast_raw(void* data, int64_t n, ElemType t, int root) const;
  Work send_raw(const void* data, int64_t n, ElemType t, int peer, int tag) const;
  Work recv_raw(void* data, int64_t n, ElemType t, int peer, int tag) const;
  Work send_recv_raw(const void* send, void* recv, int64_t n, ElemType t, int to, int from, int tag) const;
  std::shared_ptr<CommBackend> backend_;
};

std::string host_name();

}  // namespace megatrain
