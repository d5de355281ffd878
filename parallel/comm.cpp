// Comm's backend-independent half: argument checks, the bytes-moved formula, CommStats and Work.
// Invariant: every call validates its arguments, records exactly one call in the stats and hands
// the backend one WorkState, which is finished even when issuing throws.
#include "parallel/comm.h"

#include <unistd.h>

#include <cstdlib>

#include "kernels/check.h"
#include "parallel/comm_backend.h"
#include "parallel/flight_recorder.h"

namespace megatrain {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int64_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::f32: return 4;
    case ElemType::f64: return 8;
    case ElemType::i32: return 4;
    case ElemType::i64: return 8;
    case ElemType::u8: return 1;
    case ElemType::u16: return 2;
    case ElemType::bf16: return 2;
  }
  return 0;
}

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::f32: return "f32";
    case ElemType::f64: return "f64";
    case ElemType::i32: return "i32";
    case ElemType::i64: return "i64";
    case ElemType::u8: return "u8";
    case ElemType::u16: return "u16";
    case ElemType::bf16: return "bf16";
  }
  return "?";
}

// ---- stats and work state ----

void CommStatsCounter::record_call(int64_t bytes) {
  std::lock_guard lock(mu_);
  stats_.bytes_moved += bytes;
  stats_.calls += 1;
}

void CommStatsCounter::op_started() {
  std::lock_guard lock(mu_);
  if (in_flight_++ == 0) busy_since_ = Clock::now();
}

void CommStatsCounter::op_finished() {
  std::lock_guard lock(mu_);
  if (--in_flight_ == 0)
    stats_.busy_ms += std::chrono::duration<double, std::milli>(Clock::now() - busy_since_).count();
}

void CommStatsCounter::add_exposed(double ms) {
  std::lock_guard lock(mu_);
  stats_.exposed_ms += ms;
}

CommStats CommStatsCounter::snapshot() const {
  std::lock_guard lock(mu_);
  CommStats s = stats_;
  if (in_flight_ > 0) s.busy_ms += std::chrono::duration<double, std::milli>(Clock::now() - busy_since_).count();
  return s;
}

void CommStatsCounter::reset() {
  std::lock_guard lock(mu_);
  stats_ = CommStats{};
  busy_since_ = Clock::now();  // an interval still open restarts now
}

WorkState::WorkState(std::string where_, std::shared_ptr<CommStatsCounter> stats_)
    : where(std::move(where_)), stats(std::move(stats_)) {
  stats->op_started();
}

void WorkState::finish(std::string why) {
  std::unique_lock lock(mu);
  if (complete) return;
  // The flight record and the counters before `complete`: a waiter that sees the work complete
  // (whose wait() may return before notify_all) finds them updated too.
  if (flight_id >= 0) FlightRecorder::instance().complete(flight_id, why.empty());
  stats->op_finished();
  complete = true;
  error = std::move(why);
  lock.unlock();
  cv.notify_all();
}

void Work::wait(WaitMode mode) const {
  if (!state_) return;
  const auto t0 = std::chrono::steady_clock::now();
  auto exposed = [&] {
    state_->stats->add_exposed(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  };
  if (mode == WaitMode::stream && state_->stream_wait) {
    state_->stream_wait();  // set at issue, never changed: read without the lock
    exposed();
    std::lock_guard lock(state_->mu);
    if (state_->complete && !state_->error.empty()) throw CommError(state_->error);
    return;
  }
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->complete; });
  lock.unlock();
  exposed();
  if (!state_->error.empty()) throw CommError(state_->error);
}

bool Work::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->complete;
}

CommBackend::CommBackend(int rank, int size, std::string name, std::vector<int> members)
    : rank_(rank),
      size_(size),
      name_(std::move(name)),
      stats_(std::make_shared<CommStatsCounter>()),
      flight_group_(FlightRecorder::instance().add_group(name_, std::move(members))) {}

std::string CommBackend::where(std::string_view op) const {
  return fmt::format("rank {} group '{}': {}", rank_, name_, op);
}

// ---- Comm ----

namespace {

// What the flight recorder keeps of an operation besides the group: elements, their type, and
// for send/recv the peer.
struct Flight {
  int64_t count;
  ElemType type;
  int peer = -1;
  bool is_send = false;
};

// Issues one operation: a WorkState, one recorded call, a flight record, the backend's issue; an
// issue error finishes the work before it propagates. The time the caller spends inside the issuing call
// counts as exposed (an MPI non-blocking collective may do its first round — copies of the
// whole buffer for large messages — before it returns).
template <class Issue>
Work issue(const CommBackend& b, const char* op, int64_t bytes, const Flight& f, Issue&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  auto w = std::make_shared<WorkState>(b.where(op), b.stats());
  b.stats()->record_call(bytes);
  w->flight_id = FlightRecorder::instance().issue(b.flight_group(), op, f.count, elem_type_name(f.type), f.peer, f.is_send);
  try {
    fn(w);
  } catch (const std::exception& e) {
    w->finish(e.what());
    throw;
  }
  b.stats()->add_exposed(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return Work(w);
}

[[noreturn]] void invalid(const CommBackend& b, const char* op, const std::string& why) {
  throw Error(fmt::format("{} failed: {}", b.where(op), why));
}

// Checks a counts span (one non-negative count per rank) and returns its sum.
int64_t check_counts(const CommBackend& b, const char* op, const char* what, std::span<const int64_t> counts) {
  if (static_cast<int64_t>(counts.size()) != b.size())
    invalid(b, op, fmt::format("{} has {} entries, expected one per rank ({})", what, counts.size(), b.size()));
  int64_t sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) invalid(b, op, fmt::format("{}[{}] = {} is negative", what, i, counts[i]));
    sum += counts[i];
  }
  return sum;
}

void check_n(const CommBackend& b, const char* op, int64_t n, const void* data) {
  if (n < 0) invalid(b, op, fmt::format("element count {} is negative", n));
  if (n > 0 && data == nullptr) invalid(b, op, fmt::format("null buffer for {} elements", n));
}

void check_rank(const CommBackend& b, const char* op, const char* what, int r) {
  if (r < 0 || r >= b.size()) invalid(b, op, fmt::format("{} {} out of range [0, {})", what, r, b.size()));
}

void check_tag(const CommBackend& b, const char* op, int tag) {
  if (tag < 0 || tag > b.max_tag()) invalid(b, op, fmt::format("tag {} out of range [0, {}]", tag, b.max_tag()));
}

}  // namespace

Comm::Comm(MPI_Comm comm, std::string name) : backend_(make_mpi_backend(comm, false, std::move(name), {})) {}

Comm Comm::world() {
  static std::mutex mu;
  static std::weak_ptr<CommBackend> cached;
  std::lock_guard lock(mu);
  auto b = cached.lock();
  if (!b) {
    b = make_mpi_backend(MPI_COMM_WORLD, false, "world", {});
    cached = b;
  }
  return Comm(std::move(b));
}

Comm Comm::split(int color, int key, std::string name) const { return split(color, key, std::move(name), {}); }

Comm Comm::split(int color, int key, std::string name, const CommOptions& options) const {
  if (options.max_count < 1 || options.progress_poll_us < 0)
    invalid(*backend_, "split", fmt::format("bad options max_count {} progress_poll_us {}", options.max_count,
                                            options.progress_poll_us));
  return Comm(backend_->split(color, key, std::move(name), options));
}

MPI_Comm Comm::handle() const { return backend_->mpi_handle(); }
void Comm::set_stream(const Stream& stream) const { backend_->set_stream(stream); }
int Comm::rank() const { return backend_->rank(); }
int Comm::size() const { return backend_->size(); }
const std::string& Comm::name() const { return backend_->name(); }
int Comm::max_tag() const { return backend_->max_tag(); }

Work Comm::all_reduce_raw(void* data, int64_t n, ElemType t, ReduceOp op) const {
  const CommBackend& b = *backend_;
  check_n(b, "all_reduce", n, data);
  if (t == ElemType::u16) invalid(b, "all_reduce", "uint16_t elements are moved, not added; use Bf16 for bfloat16 sums");
  if (t == ElemType::bf16 && op != ReduceOp::sum) invalid(b, "all_reduce", "Bf16 elements support sum only");
  const int64_t p = b.size(), s = n * elem_size(t);
  return issue(b, "all_reduce", 2 * (p - 1) * s / p, {n, t}, [&](auto& w) { backend_->all_reduce(w, data, n, t, op); });
}

Work Comm::reduce_scatter_raw(void* out, const void* in, std::span<const int64_t> counts, ElemType t) const {
  const CommBackend& b = *backend_;
  const int64_t total = check_counts(b, "reduce_scatter", "counts", counts);
  check_n(b, "reduce_scatter", total, in);
  check_n(b, "reduce_scatter", counts[b.rank()], out);
  if (t != ElemType::f32 && t != ElemType::bf16) invalid(b, "reduce_scatter", "elements must be float or Bf16");
  const int64_t p = b.size(), s = total * elem_size(t);
  return issue(b, "reduce_scatter", (p - 1) * s / p, {total, t},
               [&](auto& w) { backend_->reduce_scatter(w, out, in, counts, t); });
}

Work Comm::all_gather_raw(void* out, const void* in, std::span<const int64_t> counts, ElemType t) const {
  const CommBackend& b = *backend_;
  const int64_t total = check_counts(b, "all_gather", "counts", counts);
  check_n(b, "all_gather", total, out);
  check_n(b, "all_gather", counts[b.rank()], in);
  const int64_t p = b.size(), s = total * elem_size(t);
  return issue(b, "all_gather", (p - 1) * s / p, {total, t}, [&](auto& w) { backend_->all_gather(w, out, in, counts, t); });
}

Work Comm::all_to_all(float* out, std::span<const int64_t> recv_counts, const float* in,
                      std::span<const int64_t> send_counts) const {
  const CommBackend& b = *backend_;
  const int64_t sent = check_counts(b, "all_to_all", "send_counts", send_counts);
  const int64_t received = check_counts(b, "all_to_all", "recv_counts", recv_counts);
  check_n(b, "all_to_all", sent, in);
  check_n(b, "all_to_all", received, out);
  if (send_counts[b.rank()] != recv_counts[b.rank()])
    invalid(b, "all_to_all",
            fmt::format("send_counts[{0}] = {1} differs from recv_counts[{0}] = {2} (this rank's own part)", b.rank(),
                        send_counts[b.rank()], recv_counts[b.rank()]));
  return issue(b, "all_to_all", (sent - send_counts[b.rank()]) * 4, {sent, ElemType::f32},
               [&](auto& w) { backend_->all_to_all(w, out, recv_counts, in, send_counts); });
}

Work Comm::broadcast_raw(void* data, int64_t n, ElemType t, int root) const {
  const CommBackend& b = *backend_;
  check_n(b, "broadcast", n, data);
  check_rank(b, "broadcast", "root", root);
  return issue(b, "broadcast", b.size() > 1 ? n * elem_size(t) : 0, {n, t},
               [&](auto& w) { backend_->broadcast(w, data, n, t, root); });
}

Work Comm::send_raw(const void* data, int64_t n, ElemType t, int peer, int tag) const {
  const CommBackend& b = *backend_;
  check_n(b, "send", n, data);
  check_rank(b, "send", "peer", peer);
  check_tag(b, "send", tag);
  return issue(b, "send", n * elem_size(t), {n, t, peer, true}, [&](auto& w) { backend_->send(w, data, n, t, peer, tag); });
}

Work Comm::recv_raw(void* data, int64_t n, ElemType t, int peer, int tag) const {
  const CommBackend& b = *backend_;
  check_n(b, "recv", n, data);
  check_rank(b, "recv", "peer", peer);
  check_tag(b, "recv", tag);
  return issue(b, "recv", 0, {n, t, peer, false}, [&](auto& w) { backend_->recv(w, data, n, t, peer, tag); });
}

Work Comm::send_recv_raw(const void* send, void* recv, int64_t n, ElemType t, int to, int from, int tag) const {
  const CommBackend& b = *backend_;
  check_n(b, "send_recv", n, send);
  check_n(b, "send_recv", n, recv);
  check_rank(b, "send_recv", "to", to);
  check_rank(b, "send_recv", "from", from);
  check_tag(b, "send_recv", tag);
  return issue(b, "send_recv", n * elem_size(t), {n, t, to, true},
               [&](auto& w) { backend_->send_recv(w, send, recv, n, t, to, from, tag); });
}

Work Comm::barrier_async() const {
  return issue(*backend_, "barrier", 0, {0, ElemType::u8}, [&](auto& w) { backend_->barrier(w); });
}

void Comm::barrier() const { barrier_async().wait(); }

CommStats Comm::stats() const { return backend_->stats()->snapshot(); }
void Comm::reset_stats() const { backend_->stats()->reset(); }
void Comm::abort(int code) const {
  backend_->abort(code);
  std::_Exit(code);  // not reached: the backend does not return
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace megatrain
