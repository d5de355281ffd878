// A read-only memory mapping of a whole file (the indexed dataset's .idx and .bin, the loss-mask
// companion). Movable; unmaps on destruction. A file of size 0 maps nothing (data() is null).
#pragma once
#include <cstddef>
#include <string>
#include <utility>

namespace megatrain {

class ReadOnlyMapping {
 public:
  ReadOnlyMapping() = default;
  ReadOnlyMapping(ReadOnlyMapping&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
  ReadOnlyMapping& operator=(ReadOnlyMapping&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ReadOnlyMapping(const ReadOnlyMapping&) = delete;
  ~ReadOnlyMapping();

  // DataError naming PATH: not found (run preprocess), unreadable, not a regular file, mmap failed.
  static ReadOnlyMapping map(const std::string& path);

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace megatrain
