// The MPI backend of Comm: every operation is issued on the caller's thread as MPI non-blocking
// calls (MPI_Iallreduce, MPI_Ireduce_scatter, MPI_Iallgatherv, MPI_Ibcast, MPI_Isend/Irecv,
// MPI_Ibarrier), and a progress thread per communicator polls them with MPI_Testall, sleeping
// between polls, and finishes their Works. [Note: progress] bench/RESULTS.md "Communication
// progress" measured this against a communication thread running blocking MPI calls: Open MPI
// busy-polls inside a blocking call, which takes the core the rank computes on.
// Invariant: issue order on the caller's thread is MPI call order, so the "same collectives in
// the same order" rule of comm.h is all that matching needs; every Work is finished exactly once.
#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/half.h"
#include "parallel/comm_backend.h"

namespace megatrain {
namespace {

MPI_Datatype mpi_type(ElemType t) {
  switch (t) {
    case ElemType::f32: return MPI_FLOAT;
    case ElemType::f64: return MPI_DOUBLE;
    case ElemType::i32: return MPI_INT32_T;
    case ElemType::i64: return MPI_INT64_T;
    case ElemType::u8: return MPI_UINT8_T;
    case ElemType::u16:
    case ElemType::bf16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

// Bf16 sum (comm.h): inout[i] = bf16(float(in[i]) + float(inout[i])).
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

// The MPI operation of (t, op): a user operation for Bf16 sums, created once (MPI is initialised
// by then: a Comm exists), never freed (MPI_Finalize releases it).
MPI_Op mpi_op(ElemType t, ReduceOp op) {
  if (t == ElemType::bf16) {
    static const MPI_Op sum = [] {
      MPI_Op o = MPI_OP_NULL;
      MPI_Op_create(&bf16_sum, /*commute=*/1, &o);
      return o;
    }();
    return sum;
  }
  return op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
}

std::string mpi_error_string(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return std::string(msg, static_cast<size_t>(len));
}

// A non-null address for zero-element buffers (some MPI argument checks reject null).
float g_empty[1];

template <class T>
T* nonnull(T* p) {
  return p ? p : reinterpret_cast<T*>(g_empty);
}

// One issued operation: its requests and the count arrays MPI reads until completion.
struct MpiOp {
  std::shared_ptr<WorkState> work;
  std::vector<MPI_Request> requests;
  std::vector<int> counts, displs;
};

class MpiBackend final : public CommBackend {
 public:
  MpiBackend(MPI_Comm comm, bool owned, std::string name, const CommOptions& options, int rank, int size, int tag_ub,
             std::vector<int> members)
      : CommBackend(rank, size, std::move(name), std::move(members)), comm_(comm), owned_(owned), options_(options), tag_ub_(tag_ub) {}

  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      // After MPI_Finalize, or while an exception unwinds (the job is ending: main aborts it), the
      // operations in flight are abandoned: a peer that never arrives must not hang the unwinding.
      abandon_ = finalized != 0 || std::uncaught_exceptions() > 0;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (owned_ && !finalized && !abandon_) MPI_Comm_free(&comm_);
  }

  MPI_Comm mpi_handle() const override { return comm_; }
  void set_stream(const Stream& stream) override {
    if (stream.device != Device::cpu)
      throw Error(fmt::format("{} failed: the MPI backend moves host memory and takes CPU streams only; device "
                              "buffers need the NCCL backend (parallel/comm_nccl.h)",
                              where("set_stream")));
  }
  // The largest tag, MPI_TAG_UB, is reserved for all_to_all's messages.
  int max_tag() const override { return tag_ub_ - 1; }

  std::shared_ptr<CommBackend> split(int color, int key, std::string name, const CommOptions& options) const override {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &out), "split");
    return make_mpi_backend(out, true, std::move(name), options);
  }

  void all_reduce(const WorkPtr& w, void* data, int64_t n, ElemType t, ReduceOp op) override {
    MpiOp o{w, {}, {}, {}};
    const MPI_Op mop = mpi_op(t, op);
    for_chunks(n, [&](int64_t off, int c) {
      check(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + off * elem_size(t), c, mpi_type(t), mop, comm_,
                           &o.requests.emplace_back()),
            "all_reduce");
    });
    submit(std::move(o));
  }

  void reduce_scatter(const WorkPtr& w, void* out_v, const void* in_v, std::span<const int64_t> counts,
                      ElemType t) override {
    MpiOp o{w, {}, {}, {}};
    // Addressed in elements of type t through char pointers.
    const int64_t b = elem_size(t);
    char* out = static_cast<char*>(out_v);
    const char* in = static_cast<const char*>(in_v);
    const MPI_Datatype type = mpi_type(t);
    const MPI_Op op = mpi_op(t, ReduceOp::sum);
    const int64_t total = sum(counts);
    if (total > 0 && total <= options_.max_count) {
      o.counts.assign(counts.begin(), counts.end());
      check(MPI_Ireduce_scatter(nonnull(in), nonnull(out), o.counts.data(), type, op, comm_, &o.requests.emplace_back()),
            "reduce_scatter");
    } else {
      // Too large for int counts: one chunked reduce to each rank of its part.
      int64_t displ = 0;
      for (int j = 0; j < size(); ++j) {
        for_chunks(counts[j], [&](int64_t off, int c) {
          check(MPI_Ireduce(in + (displ + off) * b, j == rank() ? out + off * b : nullptr, c, type, op, j, comm_,
                            &o.requests.emplace_back()),
                "reduce_scatter");
        });
        displ += counts[j];
      }
    }
    submit(std::move(o));
  }

  void all_gather(const WorkPtr& w, void* out_v, const void* in_v, std::span<const int64_t> counts,
                  ElemType t) override {
    MpiOp o{w, {}, {}, {}};
    // Addressed in elements of type t through char pointers.
    const int64_t b = elem_size(t);
    char* out = static_cast<char*>(out_v);
    const char* in = static_cast<const char*>(in_v);
    const MPI_Datatype type = mpi_type(t);
    const int64_t total = sum(counts);
    int64_t mine = 0;
    for (int j = 0; j < rank(); ++j) mine += counts[j];
    if (total > 0 && total <= options_.max_count) {
      o.counts.assign(counts.begin(), counts.end());
      o.displs.resize(o.counts.size());
      for (size_t j = 1; j < o.counts.size(); ++j) o.displs[j] = o.displs[j - 1] + o.counts[j - 1];
      const void* send = in == out + mine * b ? MPI_IN_PLACE : nonnull(in);
      check(MPI_Iallgatherv(send, o.counts[rank()], type, out, o.counts.data(), o.displs.data(), type, comm_,
                            &o.requests.emplace_back()),
            "all_gather");
    } else if (total > 0) {
      // Too large for int counts: each rank broadcasts its part, chunked.
      if (in != out + mine * b && counts[rank()] > 0)
        std::memmove(out + mine * b, in, static_cast<size_t>(counts[rank()] * b));
      int64_t displ = 0;
      for (int j = 0; j < size(); ++j) {
        for_chunks(counts[j], [&](int64_t off, int c) {
          check(MPI_Ibcast(out + (displ + off) * b, c, type, j, comm_, &o.requests.emplace_back()), "all_gather");
        });
        displ += counts[j];
      }
    }
    submit(std::move(o));
  }

  // Point-to-point on the reserved tag (Open MPI's own Ialltoallv is the same pairwise exchange,
  // with int counts): receives first, then sends; this rank's own part is copied at issue.
  void all_to_all(const WorkPtr& w, float* out, std::span<const int64_t> recv_counts, const float* in,
                  std::span<const int64_t> send_counts) override {
    MpiOp o{w, {}, {}, {}};
    int64_t displ = 0;
    for (int j = 0; j < size(); ++j) {
      if (j != rank())
        for_chunks(recv_counts[j], [&](int64_t off, int c) {
          check(MPI_Irecv(out + displ + off, c, MPI_FLOAT, j, tag_ub_, comm_, &o.requests.emplace_back()),
                "all_to_all");
        });
      displ += recv_counts[j];
    }
    int64_t own_out = 0;
    for (int j = 0; j < rank(); ++j) own_out += recv_counts[j];
    displ = 0;
    for (int j = 0; j < size(); ++j) {
      if (j != rank())
        for_chunks(send_counts[j], [&](int64_t off, int c) {
          check(MPI_Isend(in + displ + off, c, MPI_FLOAT, j, tag_ub_, comm_, &o.requests.emplace_back()),
                "all_to_all");
        });
      else if (send_counts[j] > 0)
        std::memcpy(out + own_out, in + displ, static_cast<size_t>(send_counts[j]) * sizeof(float));
      displ += send_counts[j];
    }
    submit(std::move(o));
  }

  void broadcast(const WorkPtr& w, void* data, int64_t n, ElemType t, int root) override {
    MpiOp o{w, {}, {}, {}};
    for_chunks(n, [&](int64_t off, int c) {
      check(MPI_Ibcast(static_cast<char*>(data) + off * elem_size(t), c, mpi_type(t), root, comm_,
                       &o.requests.emplace_back()),
            "broadcast");
    });
    submit(std::move(o));
  }

  // A zero-element send or recv still posts one (empty) message, so the two sides match.
  void send(const WorkPtr& w, const void* data, int64_t n, ElemType t, int peer, int tag) override {
    MpiOp o{w, {}, {}, {}};
    for_chunks(std::max<int64_t>(n, 1), [&](int64_t off, int c) {
      check(MPI_Isend(nonnull(static_cast<const char*>(data)) + off * elem_size(t), n == 0 ? 0 : c, mpi_type(t), peer,
                      tag, comm_, &o.requests.emplace_back()),
            "send");
    });
    submit(std::move(o));
  }

  void recv(const WorkPtr& w, void* data, int64_t n, ElemType t, int peer, int tag) override {
    MpiOp o{w, {}, {}, {}};
    for_chunks(std::max<int64_t>(n, 1), [&](int64_t off, int c) {
      check(MPI_Irecv(nonnull(static_cast<char*>(data)) + off * elem_size(t), n == 0 ? 0 : c, mpi_type(t), peer, tag,
                      comm_, &o.requests.emplace_back()),
            "recv");
    });
    submit(std::move(o));
  }

  void send_recv(const WorkPtr& w, const void* send, void* recv, int64_t n, ElemType t, int to, int from,
                 int tag) override {
    MpiOp o{w, {}, {}, {}};
    for_chunks(std::max<int64_t>(n, 1), [&](int64_t off, int c) {
      check(MPI_Irecv(nonnull(static_cast<char*>(recv)) + off * elem_size(t), n == 0 ? 0 : c, mpi_type(t), from, tag,
                      comm_, &o.requests.emplace_back()),
            "send_recv");
      check(MPI_Isend(nonnull(static_cast<const char*>(send)) + off * elem_size(t), n == 0 ? 0 : c, mpi_type(t), to,
                      tag, comm_, &o.requests.emplace_back()),
            "send_recv");
    });
    submit(std::move(o));
  }

  void barrier(const WorkPtr& w) override {
    MpiOp o{w, {}, {}, {}};
    check(MPI_Ibarrier(comm_, &o.requests.emplace_back()), "barrier");
    submit(std::move(o));
  }

  [[noreturn]] void abort(int code) const override {
    MPI_Abort(comm_, code);
    std::_Exit(code);
  }

 private:
  void check(int rc, const char* op) const {
    if (rc != MPI_SUCCESS) throw CommError(fmt::format("{} failed: {}", where(op), mpi_error_string(rc)));
  }

  static int64_t sum(std::span<const int64_t> counts) {
    int64_t s = 0;
    for (int64_t c : counts) s += c;
    return s;
  }

  // Calls fn(offset, count) for consecutive pieces of [0, n) of at most max_count elements.
  template <class Fn>
  void for_chunks(int64_t n, Fn&& fn) const {
    for (int64_t off = 0; off < n; off += options_.max_count)
      fn(off, static_cast<int>(std::min(options_.max_count, n - off)));
  }

  // Hands an issued operation to the progress thread (started on first use); one with no
  // requests is complete now.
  void submit(MpiOp o) {
    if (o.requests.empty()) {
      o.work->finish({});
      return;
    }
    {
      std::lock_guard lock(mu_);
      incoming_.push_back(std::move(o));
      if (!thread_.joinable()) thread_ = std::thread([this] { progress_loop(); });
    }
    cv_.notify_one();
  }

  // True once `o` has completed (its work finished), successfully or not.
  bool test(MpiOp& o) const {
    int flag = 0;
    std::vector<MPI_Status> statuses(o.requests.size());
    const int rc = MPI_Testall(static_cast<int>(o.requests.size()), o.requests.data(), &flag, statuses.data());
    if (rc != MPI_SUCCESS) {
      int err = rc;
      if (rc == MPI_ERR_IN_STATUS)
        for (const MPI_Status& s : statuses)
          if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) {
            err = s.MPI_ERROR;
            break;
          }
      o.work->finish(fmt::format("{} failed: {}", o.work->where, mpi_error_string(err)));
      return true;
    }
    if (flag) o.work->finish({});
    return flag != 0;
  }

  void progress_loop() {
    std::vector<MpiOp> active;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (active.empty()) cv_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
        for (MpiOp& o : incoming_) active.push_back(std::move(o));
        incoming_.clear();
        if (abandon_ || (stop_ && active.empty())) return;
      }
      std::erase_if(active, [&](MpiOp& o) { return test(o); });
      if (!active.empty()) std::this_thread::sleep_for(std::chrono::microseconds(options_.progress_poll_us));
    }
  }

  MPI_Comm comm_;
  bool owned_;
  CommOptions options_;
  int tag_ub_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<MpiOp> incoming_;  // issued, not yet seen by the progress thread
  bool stop_ = false, abandon_ = false;
  std::thread thread_;
};

}  // namespace

std::vector<int> mpi_world_ranks(MPI_Comm comm, int size) {
  std::vector<int> mine(static_cast<size_t>(size)), world(static_cast<size_t>(size), -1);
  for (int i = 0; i < size; ++i) mine[static_cast<size_t>(i)] = i;
  MPI_Group g = MPI_GROUP_NULL, w = MPI_GROUP_NULL;
  if (MPI_Comm_group(comm, &g) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &w) == MPI_SUCCESS)
    MPI_Group_translate_ranks(g, size, mine.data(), w, world.data());
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (w != MPI_GROUP_NULL) MPI_Group_free(&w);
  return world;
}

std::shared_ptr<CommBackend> make_mpi_backend(MPI_Comm comm, bool owned, std::string name, const CommOptions& options) {
  auto fail = [&](const char* op, const std::string& why) {
    if (owned) MPI_Comm_free(&comm);
    throw CommError(fmt::format("group '{}': {} failed: {}", name, op, why));
  };
  if (comm == MPI_COMM_NULL) fail("split", "no communicator (MPI_UNDEFINED color)");
  int level = 0;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    fail("init", "MPI was initialised without MPI_THREAD_MULTIPLE (initialise it with MpiRuntime)");
  int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) fail("set_errhandler", mpi_error_string(rc));
  int rank = 0, size = 1, flag = 0;
  int* tag_ub = nullptr;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);  // cached on the world only
  if (rc != MPI_SUCCESS || !flag) fail("get_attr", "no MPI_TAG_UB");
  return std::make_shared<MpiBackend>(comm, owned, std::move(name), options, rank, size, *tag_ub,
                                      mpi_world_ranks(comm, size));
}

}  // namespace megatrain
