// Comm: a communicator over MPI. Rule for every user: all ranks of a communicator issue the same
// collectives in the same order. Errors raise megatrain::Error naming the rank and the operation
// (MPI_ERRORS_RETURN is set, so MPI never aborts behind our back).
// This is the foundation's blocking subset; the data-parallel issue adds async Work handles.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
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

// A handle to a communicator. Copies share it. `world()` and the two-argument constructor do not
// own the MPI_Comm; a Comm made by `split` owns its MPI_Comm, which is freed (MPI_Comm_free) when
// the last copy dies — or left alone if MPI is already finalised.
class Comm {
 public:
  Comm(MPI_Comm comm, std::string name);
  static Comm world();

  // Collective over every rank of this communicator: ranks passing the same `color` form one new
  // communicator, ranked by `key` (ties by rank here). Its errors, like this one's, are returned.
  Comm split(int color, int key, std::string name) const;
  // The raw communicator, for libraries that take one (MPI-IO through HDF5).
  MPI_Comm handle() const { return comm_; }

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
  std::shared_ptr<MPI_Comm> owned_;  // non-null only for communicators made by split()
  std::string name_;
  int rank_ = 0, size_ = 1;
};

std::string host_name();

}  // namespace megatrain
