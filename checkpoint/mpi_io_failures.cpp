#include "checkpoint/mpi_io_failures.h"

#include <fmt/format.h>
#include <mpi.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace megatrain {
namespace {

thread_local IoFailureLog* t_log = nullptr;

// What a definition below returns for its PMPI_ call's result `rc`, inside an IoFailureLog:
// MPI_SUCCESS, after noting a failure — an error, or `local` saying fewer than `count` items of
// `type` were written — and making the status say everything was (HDF5 checks it).
int kept(const char* function, int rc, int err, MPI_Status* local, MPI_Datatype type, int count, MPI_Status* status) {
  std::string detail;
  MPI_Count got = 0, size = 0;
  if (local) {
    PMPI_Get_elements_x(local, type, &got);
    PMPI_Type_size_x(type, &size);
  }
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    PMPI_Error_string(rc, text, &n);
    detail = fmt::format("{} failed ({})", function, std::string(text, static_cast<size_t>(n)));
  } else if (local && got != size * count) {
    detail = fmt::format("{} wrote {} of {} bytes", function, got, size * count);
  }
  if (!detail.empty()) {
    t_log->note_mpi(detail, err);
    if (local) PMPI_Status_set_elements_x(local, type, size * count);
  }
  if (local && status != MPI_STATUS_IGNORE) *status = *local;
  return MPI_SUCCESS;
}

}  // namespace

IoFailureLog::IoFailureLog() : previous_(std::exchange(t_log, this)) {}

IoFailureLog::~IoFailureLog() { t_log = previous_; }

void IoFailureLog::note(const std::string& what, int err) {
  if (first_ && (first_->err != 0 || err == 0)) return;
  first_ = IoFailure{first_ ? first_->what + "; then " + what : what, err};
}

void IoFailureLog::note_mpi(const std::string& detail, int err) {
  note(fmt::format("{}: {}{}", current_.empty() ? "HDF5 metadata I/O" : current_, detail,
                   err != 0 ? fmt::format(": {}", std::strerror(err)) : std::string(" (no errno)")),
       err);
}

}  // namespace megatrain

// [Note: MPI-IO failures kept from HDF5] (checkpoint/mpi_io_failures.h): the MPI-IO calls HDF5
// writes with. Outside an IoFailureLog each is its PMPI_ original, untouched.
extern "C" {

int MPI_File_write_at(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype type,
                      MPI_Status* status) {
  if (!megatrain::t_log) return PMPI_File_write_at(fh, offset, buf, count, type, status);
  MPI_Status local;
  errno = 0;
  const int rc = PMPI_File_write_at(fh, offset, buf, count, type, &local);
  return megatrain::kept("MPI_File_write_at", rc, errno, &local, type, count, status);
}

int MPI_File_write_at_all(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype type,
                          MPI_Status* status) {
  if (!megatrain::t_log) return PMPI_File_write_at_all(fh, offset, buf, count, type, status);
  MPI_Status local;
  errno = 0;
  const int rc = PMPI_File_write_at_all(fh, offset, buf, count, type, &local);
  return megatrain::kept("MPI_File_write_at_all", rc, errno, &local, type, count, status);
}

int MPI_File_set_size(MPI_File fh, MPI_Offset size) {
  if (!megatrain::t_log) return PMPI_File_set_size(fh, size);
  errno = 0;
  const int rc = PMPI_File_set_size(fh, size);
  return megatrain::kept("MPI_File_set_size", rc, errno, nullptr, MPI_BYTE, 0, MPI_STATUS_IGNORE);
}

int MPI_File_sync(MPI_File fh) {
  if (!megatrain::t_log) return PMPI_File_sync(fh);
  errno = 0;
  const int rc = PMPI_File_sync(fh);
  return megatrain::kept("MPI_File_sync", rc, errno, nullptr, MPI_BYTE, 0, MPI_STATUS_IGNORE);
}

int MPI_File_close(MPI_File* fh) {
  if (!megatrain::t_log) return PMPI_File_close(fh);
  errno = 0;
  const int rc = PMPI_File_close(fh);
  return megatrain::kept("MPI_File_close", rc, errno, nullptr, MPI_BYTE, 0, MPI_STATUS_IGNORE);
}

}  // extern "C"
