#include "parallel/comm.h"

#include <unistd.h>

#include <algorithm>
#include <climits>

#include "kernels/check.h"

namespace megatrain {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // MULTIPLE: the asynchronous checkpoint writer runs collectives on its own communicator from
    // a background thread while the training thread runs its own.
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Comm::Comm(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Comm Comm::world() { return Comm(MPI_COMM_WORLD, "world"); }

Comm Comm::split(int color, int key, std::string name) const {
  MPI_Comm out = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, color, key, &out), "comm_split");
  // The owner frees the handle once the last copy is gone; after MPI_Finalize that is illegal.
  auto owned = std::shared_ptr<MPI_Comm>(new MPI_Comm(out), [](MPI_Comm* c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
    delete c;
  });
  check(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "comm_set_errhandler");
  Comm result(out, std::move(name));
  result.owned_ = std::move(owned);
  return result;
}

void Comm::check(int rc, const char* op) const {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(fmt::format("rank {} group '{}': MPI {} failed: {}", rank_, name_, op, std::string(msg, len)));
}

void Comm::allreduce_sum(float* data, int64_t n) const {
  for (int64_t off = 0; off < n; off += INT_MAX) {
    const int count = static_cast<int>(std::min<int64_t>(INT_MAX, n - off));
    check(MPI_Allreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, MPI_SUM, comm_), "allreduce");
  }
}

double Comm::allreduce_sum(double value) const {
  check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, comm_), "allreduce");
  return value;
}

void Comm::barrier() const { check(MPI_Barrier(comm_), "barrier"); }

void Comm::abort(int code) const {
  MPI_Abort(comm_, code);
  std::_Exit(code);
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace megatrain
