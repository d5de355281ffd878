// The NCCL backend (see comm_nccl.h): device operations on the communicator's own stream after an
// event handshake with the caller's stream, host operations on its MPI communicator, a progress
// thread that finishes Works and aborts the NCCL communicator on an error or a timeout.
// Invariant: every NCCL call and the abort happen under mu_, so no call ever sees an aborted
// communicator; every Work is finished exactly once (by the progress thread, or at issue).
#include "parallel/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "parallel/comm_backend.h"
#include "parallel/device_select.h"
#include "parallel/launch_env.h"
#include "parallel/nccl_bootstrap.h"
#include "parallel/nccl_calls.h"
#include "parallel/nccl_types.h"

namespace megatrain {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "parallel/nccl_bootstrap.h: the NCCL unique id size changed");

using Clock = std::chrono::steady_clock;

// A CUDA event without timing, destroyed with its last owner (an operation's record and its Work).
class DeviceEvent {
 public:
  explicit DeviceEvent(cudaEvent_t e) : e_(e) {}
  ~DeviceEvent() { cudaEventDestroy(e_); }
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_;
};

// One device operation in flight: its Work, its completion event, when it was issued.
struct NcclOp {
  std::shared_ptr<WorkState> work;
  std::shared_ptr<DeviceEvent> done;
  Clock::time_point issued;
};

size_t count_of(int64_t n) { return static_cast<size_t>(n); }

class NcclBackend final : public CommBackend, public std::enable_shared_from_this<NcclBackend> {
 public:
  // Takes ownership of `comm`; `host` holds the same ranks in the same order.
  NcclBackend(std::shared_ptr<CommBackend> host, ncclComm_t comm, int device, const NcclOptions& options,
              cudaStream_t compute, std::string name)
      : CommBackend(host->rank(), host->size(), std::move(name), mpi_world_ranks(host->mpi_handle(), host->size())),
        host_(std::move(host)),
        comm_(comm),
        device_(device),
        options_(options),
        compute_(compute) {
    try {
      cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "init");
      cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "init");
    } catch (...) {  // the destructor does not run: release what was made
      ncclCommAbort(comm_);
      if (stream_) cudaStreamDestroy(stream_);
      throw;
    }
  }

  ~NcclBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      // While an exception unwinds the job is ending (main aborts it): abandon what is in flight.
      abandon_ = std::uncaught_exceptions() > 0;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (comm_ && abandon_) ncclCommAbort(comm_);
    else if (comm_) ncclCommDestroy(comm_);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  MPI_Comm mpi_handle() const override { return host_->mpi_handle(); }
  int max_tag() const override { return host_->max_tag(); }

  void set_stream(const Stream& stream) override {
    if (stream.device != Device::cuda)
      throw Error(fmt::format("{} failed: the NCCL backend orders its operations after a CUDA stream; pass the "
                              "compute stream (Stream{{Device::cuda, handle}}), not a CPU stream",
                              where("set_stream")));
    std::lock_guard lock(mu_);
    compute_ = static_cast<cudaStream_t>(stream.handle);
  }

  // MPI_Comm_split and ncclCommSplit with the same color and key; both order a color's members by
  // key, which this checks by comparing the rank and size each gives.
  std::shared_ptr<CommBackend> split(int color, int key, std::string name, const CommOptions& options) const override {
    std::shared_ptr<CommBackend> host = host_->split(color, key, name + ".host", options);
    ncclComm_t child = nullptr;
    cudaStream_t compute = nullptr;
    {
      std::lock_guard lock(mu_);
      check_usable("split");
      nccl(ncclCommSplit(comm_, color, key, &child, nullptr), "split");
      compute = compute_;
    }
    int rank = -1, size = -1;
    if (ncclCommUserRank(child, &rank) != ncclSuccess || ncclCommCount(child, &size) != ncclSuccess ||
        rank != host->rank() || size != host->size()) {
      ncclCommAbort(child);
      throw CommError(fmt::format("{} failed: ncclCommSplit placed this rank at {} of {} but MPI_Comm_split at {} of "
                                  "{} for color {} key {} (group '{}'); both must order members by key",
                                  where("split"), rank, size, host->rank(), host->size(), color, key, name));
    }
    return std::make_shared<NcclBackend>(std::move(host), child, device_, options_, compute, std::move(name));
  }

  void all_reduce(const WorkPtr& w, void* data, int64_t n, ElemType t, ReduceOp op) override {
    if (on_host("all_reduce", {data})) return host_->all_reduce(w, data, n, t, op);
    enqueue(w, "all_reduce", [&](ncclComm_t c) {
      const NcclReduction r = nccl_reduction(t, op);
      return ncclAllReduce(data, data, count_of(n), r.type, r.op, c, stream_);
    });
  }

  void reduce_scatter(const WorkPtr& w, void* out, const void* in, std::span<const int64_t> counts,
                      ElemType t) override {
    if (on_host("reduce_scatter", {out, in})) return host_->reduce_scatter(w, out, in, counts, t);
    enqueue(w, "reduce_scatter", [&](ncclComm_t c) {
      const NcclReduction r = nccl_reduction(t, ReduceOp::sum);
      return nccl_reduce_scatter(out, in, counts, elem_size(t), r.type, r.op, c, stream_);
    });
  }

  void all_gather(const WorkPtr& w, void* out, const void* in, std::span<const int64_t> counts,
                  ElemType t) override {
    if (on_host("all_gather", {out, in})) return host_->all_gather(w, out, in, counts, t);
    enqueue(w, "all_gather", [&](ncclComm_t c) {
      return nccl_all_gather(out, in, counts, elem_size(t), nccl_data_type(t), rank(), c, stream_);
    });
  }

  void all_to_all(const WorkPtr& w, float* out, std::span<const int64_t> recv_counts, const float* in,
                  std::span<const int64_t> send_counts) override {
    if (on_host("all_to_all", {out, in})) return host_->all_to_all(w, out, recv_counts, in, send_counts);
    enqueue(w, "all_to_all",
            [&](ncclComm_t c) { return nccl_all_to_all(out, recv_counts, in, send_counts, c, stream_); });
  }

  void broadcast(const WorkPtr& w, void* data, int64_t n, ElemType t, int root) override {
    if (on_host("broadcast", {data})) return host_->broadcast(w, data, n, t, root);
    enqueue(w, "broadcast", [&](ncclComm_t c) {
      return ncclBroadcast(data, data, count_of(n), nccl_data_type(t), root, c, stream_);
    });
  }

  // Tags are checked by Comm but NCCL has none (comm_nccl.h). An empty message moves nothing: both
  // sides skip it.
  void send(const WorkPtr& w, const void* data, int64_t n, ElemType t, int peer, int tag) override {
    if (on_host("send", {data})) return host_->send(w, data, n, t, peer, tag);
    if (n == 0) return w->finish({});
    enqueue(w, "send", [&](ncclComm_t c) { return ncclSend(data, count_of(n), nccl_data_type(t), peer, c, stream_); });
  }

  void recv(const WorkPtr& w, void* data, int64_t n, ElemType t, int peer, int tag) override {
    if (on_host("recv", {data})) return host_->recv(w, data, n, t, peer, tag);
    if (n == 0) return w->finish({});
    enqueue(w, "recv", [&](ncclComm_t c) { return ncclRecv(data, count_of(n), nccl_data_type(t), peer, c, stream_); });
  }

  void send_recv(const WorkPtr& w, const void* send, void* recv, int64_t n, ElemType t, int to, int from,
                 int tag) override {
    if (on_host("send_recv", {send, recv})) return host_->send_recv(w, send, recv, n, t, to, from, tag);
    if (n == 0) return w->finish({});
    enqueue(w, "send_recv", [&](ncclComm_t c) {
      return nccl_send_recv(send, recv, count_of(n), nccl_data_type(t), to, from, c, stream_);
    });
  }

  void barrier(const WorkPtr& w) override { host_->barrier(w); }

  [[noreturn]] void abort(int code) const override {
    host_->abort(code);  // MPI_Abort: ends every rank, and with them their GPU work
    std::_Exit(code);    // not reached
  }

 private:
  void cuda(cudaError_t rc, const char* op) const {
    if (rc != cudaSuccess)
      throw CommError(fmt::format("{} failed: CUDA {}: {} (device {})", where(op), cudaGetErrorName(rc),
                                  cudaGetErrorString(rc), device_));
  }
  // Called under mu_ (or before other threads exist): comm_ is valid.
  void nccl(ncclResult_t rc, const char* op) const {
    if (rc != ncclSuccess && rc != ncclInProgress)
      throw CommError(fmt::format("{} failed: {}", where(op), nccl_error(rc)));
  }
  std::string nccl_error(ncclResult_t rc) const {
    const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    return fmt::format("NCCL {} ({})", ncclGetErrorString(rc), last && *last ? last : "no further detail");
  }
  void check_usable(const char* op) const {
    if (!failure_.empty())
      throw CommError(fmt::format("{} failed: the NCCL communicator was aborted earlier: {}", where(op), failure_));
  }

  // True when `buffers` are host memory (the MPI path), false for device or managed memory; all null
  // counts as device (comm_nccl.h). Mixing the two is an Error.
  bool on_host(const char* op, std::initializer_list<const void*> buffers) const {
    bool host = false, device = false;
    for (const void* p : buffers) {
      if (!p) continue;
      cudaPointerAttributes a{};
      cuda(cudaPointerGetAttributes(&a, p), op);
      const bool d = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
      device = device || d;
      host = host || !d;
    }
    if (host && device)
      throw Error(fmt::format("{} failed: its buffers mix host and device memory; pass device buffers (NCCL) or host "
                              "buffers (MPI), not both",
                              where(op)));
    return host;
  }

  // The handshake of comm_nccl.h: the group stream waits for the caller's stream, `calls(comm)`
  // enqueues the NCCL operation, a completion event follows, and the progress thread watches it.
  template <class Calls>
  void enqueue(const WorkPtr& w, const char* op, Calls&& calls) {
    std::lock_guard lock(mu_);
    check_usable(op);
    cuda(cudaEventRecord(ready_, compute_), op);
    cuda(cudaStreamWaitEvent(stream_, ready_, 0), op);
    ncclResult_t rc = ncclSuccess;
    try {
      rc = calls(comm_);
    } catch (const CommError&) {
      throw;
    } catch (const Error& e) {  // an unmapped type or reduction (parallel/nccl_types.h)
      throw Error(fmt::format("{} failed: {}", where(op), e.what()));
    }
    nccl(rc, op);
    cudaEvent_t e = nullptr;
    cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), op);
    auto done = std::make_shared<DeviceEvent>(e);
    cuda(cudaEventRecord(e, stream_), op);
    // A communicator already destroyed drained its operations first: nothing is left to order after.
    w->stream_wait = [self = weak_from_this(), done, op] {
      if (auto b = self.lock()) b->order_after(*done, op);
    };
    incoming_.push_back(NcclOp{w, std::move(done), Clock::now()});
    if (!thread_.joinable()) thread_ = std::thread([this] { progress_loop(); });
    cv_.notify_one();
  }

  // Work::wait in WaitMode::stream: a failure detected (now or before) throws; otherwise the
  // caller's stream waits for the operation's completion event.
  void order_after(const DeviceEvent& done, const char* op) {
    std::lock_guard lock(mu_);
    poll_async_error();
    check_usable(op);
    cuda(cudaStreamWaitEvent(compute_, done.get(), 0), op);
  }

  // Under mu_: an asynchronous NCCL error aborts the communicator.
  void poll_async_error() {
    if (!comm_) return;
    ncclResult_t async = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &async);
    if (rc != ncclSuccess) abort_locked(fmt::format("ncclCommGetAsyncError failed: {}", nccl_error(rc)));
    else if (async != ncclSuccess && async != ncclInProgress)
      abort_locked(fmt::format("asynchronous {}", nccl_error(async)));
  }

  // Under mu_: ncclCommAbort, after which every operation fails with `why`.
  void abort_locked(std::string why) {
    if (failure_.empty()) failure_ = std::move(why);
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // Finishes the operations of `active` whose completion event has been reached; after a failure
  // (an async error, a CUDA error, the timeout of the oldest) aborts and fails them all.
  void poll(std::vector<NcclOp>& active) {
    std::string failed;
    std::erase_if(active, [&](NcclOp& o) {
      const cudaError_t rc = cudaEventQuery(o.done->get());
      if (rc == cudaSuccess) o.work->finish({});
      else if (rc != cudaErrorNotReady && failed.empty())
        failed = fmt::format("CUDA {} on its completion event: {}", cudaGetErrorName(rc), cudaGetErrorString(rc));
      return rc == cudaSuccess;
    });
    std::lock_guard lock(mu_);
    if (!failed.empty()) abort_locked(failed);
    poll_async_error();
    if (failure_.empty() && !active.empty()) {
      const double waited = std::chrono::duration<double>(Clock::now() - active.front().issued).count();
      if (waited > options_.timeout_s)
        abort_locked(fmt::format("{} still incomplete after {:.0f} s (NcclOptions::timeout_s = {}); ncclCommAbort "
                                 "called: a peer may have died or stopped issuing this group's operations (the flight "
                                 "recorder dump shows which)",
                                 active.front().work->where, waited, options_.timeout_s));
    }
    if (failure_.empty()) return;
    for (NcclOp& o : active) o.work->finish(fmt::format("{} failed: {}", o.work->where, failure_));
    active.clear();
  }

  void progress_loop() {
    cudaSetDevice(device_);
    std::vector<NcclOp> active;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (active.empty()) cv_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
        for (NcclOp& o : incoming_) active.push_back(std::move(o));
        incoming_.clear();
        if (abandon_ || (stop_ && active.empty())) return;
      }
      poll(active);
      if (!active.empty()) std::this_thread::sleep_for(std::chrono::microseconds(options_.progress_poll_us));
    }
  }

  const std::shared_ptr<CommBackend> host_;
  ncclComm_t comm_;  // null once aborted
  const int device_;
  const NcclOptions options_;
  cudaStream_t compute_;  // the caller's stream (set_stream)
  cudaStream_t stream_ = nullptr;  // this communicator's own
  cudaEvent_t ready_ = nullptr;    // recorded on compute_ at each issue
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<NcclOp> incoming_;  // issued, not yet seen by the progress thread
  std::string failure_;           // why the communicator was aborted; empty while usable
  bool stop_ = false, abandon_ = false;
  std::thread thread_;
};

}  // namespace

Comm make_nccl_world(const Comm& world, const NcclOptions& options) {
  const std::string where = fmt::format("rank {} group '{}': nccl_init", world.rank(), world.name());
  int count = 0;
  if (const cudaError_t rc = cudaGetDeviceCount(&count); rc != cudaSuccess)
    throw CommError(fmt::format("{} failed: cudaGetDeviceCount: {} (the NCCL backend needs a CUDA driver and one GPU "
                                "per rank)",
                                where, cudaGetErrorString(rc)));
  const int device = device_for_local_rank(local_rank_from_env(), local_size_from_env(), count);
  if (const cudaError_t rc = cudaSetDevice(device); rc != cudaSuccess)
    throw CommError(fmt::format("{} failed: cudaSetDevice({}): {}", where, device, cudaGetErrorString(rc)));

  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(world.handle(), &dup) != MPI_SUCCESS)
    throw CommError(fmt::format("{} failed: MPI_Comm_dup of the world", where));
  std::shared_ptr<CommBackend> host = make_mpi_backend(dup, true, world.name() + ".host", {});
  const NcclUniqueIdBytes bytes = nccl_bootstrap_unique_id(Comm(host), [&] {
    ncclUniqueId id;
    if (const ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess)
      throw CommError(fmt::format("{} failed: ncclGetUniqueId: {}", where, ncclGetErrorString(rc)));
    NcclUniqueIdBytes out;
    std::memcpy(out.data(), &id, sizeof id);
    return out;
  });
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), sizeof id);
  ncclComm_t comm = nullptr;
  if (const ncclResult_t rc = ncclCommInitRank(&comm, host->size(), id, host->rank()); rc != ncclSuccess)
    throw CommError(fmt::format("{} failed: ncclCommInitRank on device {}: {} ({})", where, device,
                                ncclGetErrorString(rc), ncclGetLastError(nullptr)));
  return Comm(std::make_shared<NcclBackend>(std::move(host), comm, device, options, nullptr, world.name()));
}

ProcessGroups nccl_process_groups(const Comm& world, const ParallelDims& dims, const NcclOptions& options) {
  return ProcessGroups(make_nccl_world(world, options), dims);
}

}  // namespace megatrain
