// Comm: a communicator over MPI. Rule for every user: all ranks of a communicator issue the same
// collectives in the same order. Errors raise megatrain::Error naming the rank and the operation
// (MPI_ERRORS_RETURN is set, so MPI never aborts behind our back).
// This is the foundation's blocking subset; the data-parallel issue adds async Work handles.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

namespace megatrain {

// Initialises MPI for the lifetime of the object (a world of one is still a world).
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
};

class Comm {
 public:
  Comm(MPI_Comm comm, std::string name);
  static Comm world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  void allreduce_sum(float* data, int64_t n) const;  // in place
  double allreduce_sum(double value) const;
  void barrier() const;
  // Ends every rank of the job; used by main() after an error so no peer waits forever.
  [[noreturn]] void abort(int code) const;

 private:
  void check(int rc, const char* op) const;
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
};

std::string host_name();

}  // namespace megatrain
