#include "checkpoint/mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "kernels/check.h"

namespace megatrain {

MappedFile::MappedFile(const std::filesystem::path& path, size_t size) : size_(size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw CheckpointError(fmt::format("memory snapshot: cannot open {}: {}", path.string(), std::strerror(errno)));
  const auto fail = [&](const char* what, int err) {
    ::close(fd);
    throw CheckpointError(fmt::format("memory snapshot: cannot {} {} ({} bytes): {}{}", what, path.string(), size,
                                      std::strerror(err), err == ENOSPC ? " (is its memory full?)" : ""));
  };
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) fail("size", errno);
  if (size == 0) {
    ::close(fd);
    return;
  }
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) fail("reserve", err);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) fail("map", errno);
  ::close(fd);
  data_ = static_cast<char*>(p);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace megatrain
