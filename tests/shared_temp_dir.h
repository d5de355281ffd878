// SharedTempDir: one TempDir (tests/temp_dir.h) for all ranks of MPI_COMM_WORLD — rank 0 makes and
// later removes it, every rank gets its path. Construction and destruction are collective.
#pragma once
#include <mpi.h>

#include <filesystem>
#include <optional>
#include <string>

#include "tests/temp_dir.h"

namespace megatrain::test {

class SharedTempDir {
 public:
  explicit SharedTempDir(const std::string& tag) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) owned_.emplace(tag);
    std::string dir = owned_ ? owned_->string() : "";
    int n = static_cast<int>(dir.size());
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    dir.resize(static_cast<size_t>(n));
    MPI_Bcast(dir.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = dir;
  }
  ~SharedTempDir() { MPI_Barrier(MPI_COMM_WORLD); }  // nobody still uses it when rank 0 removes it
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::optional<TempDir> owned_;  // rank 0 only
  std::filesystem::path path_;
};

}  // namespace megatrain::test
