// Durable file I/O for checkpoints, with failures that carry their errno: a save that fails (a full
// disk, a file-size limit, a broken device) is reported as CKPT_SAVE_FAILED errno=NAME, so every
// call here takes errno right after the system call that failed. Writes go through POSIX (open,
// write, fsync, rename), whose errno is exact; a text written "durably" is on disk when the call
// returns, and a file replaced durably is either the old text or the new one after any crash.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include <mpi.h>

#include "kernels/check.h"

namespace megatrain {

// A checkpoint file could not be written or read back. err() is the errno of the call that failed,
// 0 when the layer below (MPI-IO under HDF5) did not leave one.
class CheckpointIoError : public Error {
 public:
  CheckpointIoError(const std::string& what, int err) : Error(what), err_(err) {}
  int err() const { return err_; }

 private:
  int err_;
};

// "EFBIG", "ENOSPC", …; "unknown" for 0.
std::string errno_name(int err);

// Throws CheckpointIoError "WHAT: MESSAGE" with ec's errno when ec holds an error.
void check_io(const std::error_code& ec, const std::string& what);

// fsync of a file or a folder (a folder's fsync makes the names in it durable).
void fsync_path(const std::filesystem::path& path);

// Writes `text` to `path` (created or truncated) and fsyncs it.
void write_file_durably(const std::filesystem::path& path, const std::string& text);

// Replaces `path` by `text` atomically: PATH.tmp written durably, renamed over PATH, folder fsynced.
void replace_file_durably(const std::filesystem::path& path, const std::string& text);

// zlib's CRC-32 of bytes [offset, offset + bytes) of the file.
uint32_t file_crc32(const std::filesystem::path& path, int64_t offset, int64_t bytes);

// One rank's first failure of a collective write: what failed, and the errno it left (0: none).
struct IoFailure {
  std::string what;
  int err = 0;
};

// Runs `f`; the CheckpointIoError it throws, as an IoFailure (nullopt when it throws none).
template <class F>
std::optional<IoFailure> io_failure_of(F&& f) {
  try {
    f();
  } catch (const CheckpointIoError& e) {
    return IoFailure{e.what(), e.err()};
  }
  return std::nullopt;
}

// Collective over `comm` (MPI_COMM_NULL: this process alone). When any rank passes a failure,
// throws on every rank the same CheckpointIoError: that of the lowest rank whose failure has an
// errno, else of the lowest failing rank, its message prefixed with "rank R: ".
void agree_on_io_failure(MPI_Comm comm, const std::optional<IoFailure>& failure);

}  // namespace megatrain
