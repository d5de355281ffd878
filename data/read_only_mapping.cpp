#include "data/read_only_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kernels/check.h"

namespace megatrain {

ReadOnlyMapping::~ReadOnlyMapping() {
  if (data_ != nullptr) munmap(const_cast<unsigned char*>(data_), size_);
}

ReadOnlyMapping ReadOnlyMapping::map(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    MT_DATA_CHECK(err != ENOENT,
                  "{}: file not found; run `megatrain preprocess --input FILE... "
                  "--output-prefix PREFIX` to create it",
                  path);
    MT_DATA_CHECK(false, "{}: cannot open ({}); check its permissions", path, std::strerror(err));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    MT_DATA_CHECK(false, "{}: not a regular file; point the dataset prefix at a .bin/.idx pair", path);
  }
  ReadOnlyMapping m;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = mmap(nullptr, m.size_, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    ::close(fd);
    MT_DATA_CHECK(p != MAP_FAILED, "{}: mmap failed ({}); check the file system supports mmap", path,
                  std::strerror(err));
    m.data_ = static_cast<const unsigned char*>(p);
  } else {
    ::close(fd);
  }
  return m;
}

}  // namespace megatrain
