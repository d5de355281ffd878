// A file of a given length mapped into memory for writing in place — a memory snapshot written where
// the store keeps it (checkpoint/memory_store.h), with no buffer to copy it from. Its pages are reserved
// when it is opened (posix_fallocate), so a full tmpfs is a CheckpointError then, never a SIGBUS at a
// write through the mapping. Move-only; unmaps on destruction (the file stays).
#pragma once
#include <cstddef>
#include <filesystem>

namespace megatrain {

class MappedFile {
 public:
  MappedFile() = default;
  // Opens `path` (created when missing), sets its length to `size` and maps all of it, shared, its
  // pages populated; a CheckpointError naming the file when any of that fails.
  MappedFile(const std::filesystem::path& path, size_t size);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() { unmap(); }

  char* data() const { return data_; }
  size_t size() const { return size_; }
  void unmap();

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace megatrain
