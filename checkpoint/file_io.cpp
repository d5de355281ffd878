#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "checkpoint/crc32.h"

namespace megatrain {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& what, int err) {
  throw CheckpointIoError(fmt::format("{}: {}", what, std::strerror(err)), err);
}

// An open file descriptor, closed on scope exit (a failing close of a written file is checked by
// the writer itself).
class Fd {
 public:
  Fd(const fs::path& path, int flags) : fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0) fail(fmt::format("cannot open {}", path.string()), errno);
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void close(const fs::path& path) {
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail(fmt::format("closing {}", path.string()), errno);
  }

 private:
  int fd_;
};

}  // namespace

std::string errno_name(int err) {
  const char* name = err != 0 ? strerrorname_np(err) : nullptr;
  return name ? name : err != 0 ? fmt::format("errno {}", err) : "unknown";
}

void check_io(const std::error_code& ec, const std::string& what) {
  if (ec) throw CheckpointIoError(fmt::format("{}: {}", what, ec.message()), ec.value());
}

void fsync_path(const fs::path& path) {
  Fd fd(path, O_RDONLY);
  if (::fsync(fd.get()) != 0) fail(fmt::format("fsync of {}", path.string()), errno);
}

void write_file_durably(const fs::path& path, const std::string& text) {
  Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC);
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(fmt::format("writing {}", path.string()), n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail(fmt::format("fsync of {}", path.string()), errno);
  fd.close(path);
}

void replace_file_durably(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  write_file_durably(tmp, text);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  check_io(ec, fmt::format("renaming {} to {}", tmp.string(), path.string()));
  fsync_path(path.parent_path());
}

uint32_t file_crc32(const fs::path& path, int64_t offset, int64_t bytes) {
  Fd fd(path, O_RDONLY);
  std::vector<unsigned char> buf(static_cast<size_t>(std::min<int64_t>(bytes, int64_t{8} << 20)));
  uint32_t crc = 0;
  for (int64_t at = offset, left = bytes; left > 0;) {
    const ssize_t n = ::pread(fd.get(), buf.data(), static_cast<size_t>(std::min<int64_t>(left, std::ssize(buf))), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(fmt::format("reading {}", path.string()), errno);
    if (n == 0)
      throw CheckpointIoError(fmt::format("reading {}: it ends at byte {}, before byte {}", path.string(), at,
                                          offset + bytes),
                              0);
    crc = crc32_update(crc, buf.data(), static_cast<size_t>(n));
    at += n;
    left -= n;
  }
  return crc;
}

void agree_on_io_failure(MPI_Comm comm, const std::optional<IoFailure>& failure) {
  int rank = 0, size = 1;
  if (comm != MPI_COMM_NULL) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  // The lowest key wins: failures with an errno first, then the others, each by rank.
  int key = !failure ? 2 * size : failure->err != 0 ? rank : size + rank;
  if (comm != MPI_COMM_NULL)
    MT_CHECK(MPI_Allreduce(MPI_IN_PLACE, &key, 1, MPI_INT, MPI_MIN, comm) == MPI_SUCCESS, "checkpoint: allreduce failed");
  if (key == 2 * size) return;
  const int root = key % size;
  std::string what = failure && root == rank ? fmt::format("rank {}: {}", rank, failure->what) : "";
  int64_t head[2] = {static_cast<int64_t>(what.size()), failure && root == rank ? failure->err : 0};
  if (comm != MPI_COMM_NULL) {
    MT_CHECK(MPI_Bcast(head, 2, MPI_INT64_T, root, comm) == MPI_SUCCESS, "checkpoint: broadcast failed");
    what.resize(static_cast<size_t>(head[0]));
    MT_CHECK(MPI_Bcast(what.data(), static_cast<int>(head[0]), MPI_CHAR, root, comm) == MPI_SUCCESS,
             "checkpoint: broadcast failed");
  }
  throw CheckpointIoError(what, static_cast<int>(head[1]));
}

}  // namespace megatrain
