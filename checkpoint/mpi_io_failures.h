// [Note: MPI-IO failures kept from HDF5] Parallel HDF5 1.10 cannot survive a failed write. A rank
// whose write fails leaves HDF5's collective flush early while its peers go on, and the ranks then
// wait in different collectives forever (seen with a file-size limit on 2 ranks: one in the
// metadata cache's barrier, the other in the truncate's broadcast); and a close that fails frees
// the file but keeps its id, so HDF5's shutdown crashes on it later (CVE-2020-10812, fixed only in
// 1.10.10 and 1.14.1). So HDF5 must never see a write fail. While an IoFailureLog runs an HDF5 call
// on a thread, megatrain's own definitions of the MPI-IO calls HDF5 writes with (MPI_File_write_at,
// MPI_File_write_at_all, MPI_File_set_size, MPI_File_sync, MPI_File_close: MPI's profiling
// interface, as Darshan and mpiP use it) pass each to its PMPI_ original; a failure — an error
// code, or fewer bytes written than asked — is recorded with the errno the POSIX call below left,
// and HDF5 is told the call succeeded. Every rank then finishes the file in step, and the ranks
// agree on the recorded failures afterwards (agree_on_io_failure) and give the file up. Outside
// IoFailureLog::run the definitions change nothing.
#pragma once
#include <optional>
#include <string>

#include "checkpoint/file_io.h"

namespace megatrain {

// The first failure of this rank's part of a collective write, and while it lives the receiver
// of the calling thread's MPI-IO write failures. A failure without errno (a short write) gives way
// to a later one with it, so that the report can name the cause.
class IoFailureLog {
 public:
  IoFailureLog();  // installs it for the calling thread
  ~IoFailureLog();
  IoFailureLog(const IoFailureLog&) = delete;
  IoFailureLog& operator=(const IoFailureLog&) = delete;

  // Runs `call` (true = success), naming MPI-IO failures during it after `what`; records `what`
  // when the call itself fails too.
  template <class Call>
  bool run(Call&& call, const std::string& what) {
    current_ = what;
    const bool ok = call();
    if (!ok) note(what + ": failed", 0);
    current_.clear();
    return ok;
  }
  // Called by the MPI-IO definitions: `detail` failed with errno `err` (0: none).
  void note_mpi(const std::string& detail, int err);
  const std::optional<IoFailure>& first() const { return first_; }

 private:
  void note(const std::string& what, int err);

  std::optional<IoFailure> first_;
  std::string current_;  // what the running call does
  IoFailureLog* previous_;
};

}  // namespace megatrain
