// The safetensors file format, as published by Hugging Face: an 8-byte little-endian uint64 N,
// then N bytes of UTF-8 JSON mapping each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} (offsets relative to the data section at byte 8 + N) plus an optional
// "__metadata__" object of string → string, then the little-endian tensor data.
// Invariant: a file written by safetensors_write is complete (written to `path.tmp`, fsynced, then
// renamed) and its header is padded with spaces so the data section starts at a multiple of 8; a
// SafetensorsFile that opened has a valid header whose tensors have known dtypes, sizes that match
// their shapes, and offsets that cover the data section exactly, without gaps or overlaps. Every
// problem with a file is an DataError naming the file, the tensor and what is wrong.
//
// Reading is zero-copy: SafetensorsFile maps the file read-only and bytes() returns views into
// the mapping, valid while the SafetensorsFile lives. load() makes an owned SafeTensor copy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/half.h"

namespace megatrain {

// Bytes per element of a safetensors dtype ("F32", "BF16", "I64", "BOOL", …); 0 if unknown.
size_t safetensors_dtype_size(std::string_view dtype);

// One tensor to write: the data is not copied and must stay valid during safetensors_write.
struct SafeTensorRef {
  std::string name;
  std::string dtype;           // a safetensors dtype, e.g. "F32"
  std::vector<int64_t> shape;  // {} is a 0-d scalar (one element)
  const void* data = nullptr;  // little-endian, row-major
  size_t nbytes = 0;           // must equal numel(shape) · dtype size
};

// Writes `tensors` (data in the order given) and `metadata` ("__metadata__"; left out when empty)
// to `path` atomically. Bad arguments (unknown dtype, size ≠ shape, duplicate or reserved names)
// throw Error; a file-system failure throws DataError naming the path. The header's JSON lists
// "__metadata__" first, then the tensors in the order given.
void safetensors_write(const std::string& path, const std::vector<SafeTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the data section
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// An owned copy of one tensor read from a file.
struct SafeTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

class SafetensorsFile {
 public:
  // Maps and validates the file (see the invariant at the top); throws DataError on any problem.
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor names in the order their data appears in the file (for our writer: the order given).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  // The tensor's description; a missing name is an DataError that lists a few close names.
  const TensorInfo& info(const std::string& name) const;
  // The tensor's raw little-endian bytes, a view into the mapping (not necessarily aligned).
  std::span<const uint8_t> bytes(const std::string& name) const;
  // Converts an F32, BF16 or F16 tensor to float; out.size() must equal its element count.
  void read_f32(const std::string& name, std::span<float> out) const;
  SafeTensor load(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  void unmap();

  std::string path_;
  const uint8_t* map_ = nullptr;  // the whole file, read-only
  size_t map_size_ = 0;
  size_t data_start_ = 0;  // 8 + N
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> infos_;
  std::vector<std::string> order_;  // names sorted by data offset
};

}  // namespace megatrain
