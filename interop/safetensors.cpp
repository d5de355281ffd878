// Writer and validating mmap reader for the safetensors format (see safetensors.h for the format
// and the invariants). Every check of a file on open names the file, the tensor and the problem.
#include "interop/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "kernels/check.h"

namespace megatrain {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

constexpr std::pair<std::string_view, size_t> kDtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},     {"I32", 4},     {"I16", 2}, {"I8", 1},
    {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1},    {"F8_E4M3", 1}, {"F8_E5M2", 1}};

std::string known_dtypes() {
  std::vector<std::string_view> names;
  for (const auto& [name, size] : kDtypes) names.push_back(name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// The element count of `shape`, or -1 when a dimension is negative or the product overflows.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

[[noreturn]] void io_failed(const std::string& path, const std::string& what) {
  throw DataError(fmt::format("{}: cannot {}: {}", path, what, std::strerror(errno)));
}

void write_all(int fd, const void* data, size_t n, const std::string& tmp) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) io_failed(tmp, "write");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

size_t safetensors_dtype_size(std::string_view dtype) {
  for (const auto& [name, size] : kDtypes)
    if (name == dtype) return size;
  return 0;
}

int64_t TensorInfo::numel() const { return checked_numel(shape); }

// ---- writing ----

void safetensors_write(const std::string& path, const std::vector<SafeTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafeTensorRef& t : tensors) {
    size_t esize = safetensors_dtype_size(t.dtype);
    MT_CHECK(esize != 0, "tensor '{}': unknown dtype '{}' (known: {})", t.name, t.dtype, known_dtypes());
    MT_CHECK(t.name != "__metadata__", "'__metadata__' is reserved and cannot name a tensor");
    MT_CHECK(!header.contains(t.name), "tensor '{}' is given twice", t.name);
    int64_t numel = checked_numel(t.shape);
    MT_CHECK(numel >= 0, "tensor '{}': shape [{}] has a negative or too large dimension", t.name,
             fmt::join(t.shape, ", "));
    MT_CHECK(static_cast<uint64_t>(numel) * esize == t.nbytes,
             "tensor '{}': shape [{}] of {} needs {} bytes but {} are given", t.name, fmt::join(t.shape, ", "),
             t.dtype, static_cast<uint64_t>(numel) * esize, t.nbytes);
    MT_CHECK(t.data != nullptr || t.nbytes == 0, "tensor '{}': data is null", t.name);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    MT_CHECK(false, "safetensors header for {} cannot be written (names and metadata must be UTF-8): {}", path,
             e.what());
  }
  text.resize((text.size() + 7) / 8 * 8, ' ');  // data section starts at 8 + N, a multiple of 8
  const uint64_t n = text.size();

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_failed(tmp, "create the file");
  try {
    write_all(fd, &n, sizeof(n), tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const SafeTensorRef& t : tensors) write_all(fd, t.data, t.nbytes, tmp);
    if (::fsync(fd) != 0) io_failed(tmp, "fsync");
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) io_failed(tmp, "close");
    if (std::rename(tmp.c_str(), path.c_str()) != 0) io_failed(path, "rename " + tmp + " to it");
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable (best effort: some file systems refuse to fsync a directory).
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// ---- reading ----

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_start_ = other.data_start_;
    metadata_ = std::move(other.metadata_);
    infos_ = std::move(other.infos_);
    order_ = std::move(other.order_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  using json = nlohmann::json;
  SafetensorsFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_failed(path, "open the safetensors file");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    io_failed(path, "stat");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw DataError(fmt::format("{}: file is {} bytes, shorter than the 8-byte header length of a "
                                 "safetensors file (truncated or not a safetensors file)",
                                 path, size));
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) io_failed(path, "mmap");
  f.map_ = static_cast<const uint8_t*>(m);
  f.map_size_ = size;

  uint64_t n = 0;
  std::memcpy(&n, f.map_, 8);
  MT_DATA_CHECK(n <= size - 8,
                 "{}: header length {} (the first 8 bytes) runs beyond the end of the file ({} bytes); the file "
                 "is truncated or not a safetensors file",
                 path, n, size);
  f.data_start_ = 8 + n;
  const uint64_t data_size = size - f.data_start_;

  // nlohmann keeps the last of duplicate keys silently, so note top-level keys as they are parsed.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && parsed.is_string()) {
      if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty()) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    const char* begin = reinterpret_cast<const char*>(f.map_ + 8);
    header = json::parse(begin, begin + n, on_event);
  } catch (const json::exception& e) {
    throw DataError(fmt::format("{}: the header is not valid JSON: {}", path, e.what()));
  }
  MT_DATA_CHECK(header.is_object(), "{}: the header is JSON {}, not an object of tensors", path, header.type_name());
  MT_DATA_CHECK(duplicate.empty(), "{}: tensor '{}': the name appears more than once in the header", path,
                 duplicate);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      MT_DATA_CHECK(entry.is_object(), "{}: __metadata__ is JSON {}, not an object of strings", path,
                     entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        MT_DATA_CHECK(value.is_string(), "{}: __metadata__ key '{}' holds JSON {}, not a string", path, key,
                       value.type_name());
        f.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      return DataError(fmt::format("{}: tensor '{}': {}", path, name, what));
    };
    if (!entry.is_object()) throw bad(fmt::format("entry is JSON {}, not an object", entry.type_name()));
    TensorInfo info;
    info.name = name;
    auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) throw bad("\"dtype\" is missing or not a string");
    info.dtype = dt->get<std::string>();
    size_t esize = safetensors_dtype_size(info.dtype);
    if (esize == 0) throw bad(fmt::format("unknown dtype '{}' (known: {})", info.dtype, known_dtypes()));
    auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) throw bad("\"shape\" is missing or not an array");
    for (const json& d : *sh) {
      if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t{INT64_MAX}) ||
          d.get<int64_t>() < 0)
        throw bad(fmt::format("shape {} has an entry that is not a non-negative integer", sh->dump()));
      info.shape.push_back(d.get<int64_t>());
    }
    auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      throw bad("\"data_offsets\" is missing or not [begin, end] with non-negative integers");
    info.begin = (*off)[0].get<uint64_t>();
    info.end = (*off)[1].get<uint64_t>();
    if (info.begin > info.end)
      throw bad(fmt::format("data_offsets [{}, {}] end before they begin", info.begin, info.end));
    if (info.end > data_size)
      throw bad(fmt::format("data_offsets [{}, {}] are out of range: the data section has {} bytes", info.begin,
                            info.end, data_size));
    int64_t numel = checked_numel(info.shape);
    uint64_t want = 0;
    if (numel < 0 || __builtin_mul_overflow(static_cast<uint64_t>(numel), esize, &want) || want != info.nbytes())
      throw bad(fmt::format("shape [{}] of {} needs {} bytes but data_offsets [{}, {}] span {}",
                            fmt::join(info.shape, ", "), info.dtype, numel < 0 ? "too many" : std::to_string(want),
                            info.begin, info.end, info.nbytes()));
    f.infos_.emplace(name, std::move(info));
  }

  // The tensors must tile the data section: sorted by offset, each begins where the last ended.
  std::vector<const TensorInfo*> sorted;
  for (const auto& [name, info] : f.infos_) sorted.push_back(&info);
  std::sort(sorted.begin(), sorted.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : sorted) {
    MT_DATA_CHECK(t->begin >= pos, "{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]", path,
                   t->name, t->begin, t->end, prev ? prev->name : "", prev ? prev->begin : 0, prev ? prev->end : 0);
    MT_DATA_CHECK(t->begin == pos, "{}: tensor '{}': data_offsets [{}, {}] leave a gap: bytes [{}, {}) after {} belong "
                   "to no tensor", path, t->name, t->begin, t->end, pos, t->begin,
                   prev ? "tensor '" + prev->name + "'" : std::string("the start of the data section"));
    pos = t->end;
    prev = t;
    f.order_.push_back(t->name);
  }
  MT_DATA_CHECK(pos == data_size,
                 "{}: the data section has {} bytes but the tensors cover only the first {} (last tensor: '{}'); "
                 "the header does not describe the whole file",
                 path, data_size, pos, prev ? prev->name : "none");
  return f;
}

std::vector<std::string> SafetensorsFile::names() const { return order_; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it != infos_.end()) return it->second;
  std::vector<std::pair<size_t, std::string>> near;
  for (const auto& [other, _] : infos_) near.emplace_back(edit_distance(name, other), other);
  std::sort(near.begin(), near.end());
  std::vector<std::string> close;
  for (size_t i = 0; i < near.size() && i < 5; ++i) close.push_back("'" + near[i].second + "'");
  throw DataError(fmt::format("{}: tensor '{}' is not in the file ({} tensors; closest names: {})", path_, name,
                               infos_.size(), close.empty() ? "none" : fmt::format("{}", fmt::join(close, ", "))));
}

std::span<const uint8_t> SafetensorsFile::bytes(const std::string& name) const {
  const TensorInfo& t = info(name);
  return {map_ + data_start_ + t.begin, static_cast<size_t>(t.nbytes())};
}

void SafetensorsFile::read_f32(const std::string& name, std::span<float> out) const {
  const TensorInfo& t = info(name);
  MT_DATA_CHECK(static_cast<size_t>(t.numel()) == out.size(),
                 "{}: tensor '{}': has shape [{}] ({} elements) but {} elements are expected", path_, name,
                 fmt::join(t.shape, ", "), t.numel(), out.size());
  std::span<const uint8_t> src = bytes(name);
  if (t.dtype == "F32") {
    if (!out.empty()) std::memcpy(out.data(), src.data(), src.size());
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    const bool bf16 = t.dtype == "BF16";
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, src.data() + 2 * i, 2);  // the data section need not be aligned
      out[i] = bf16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  } else {
    throw DataError(fmt::format("{}: tensor '{}': dtype {} cannot be read as float (F32, BF16 or F16 can)", path_,
                                 name, t.dtype));
  }
}

SafeTensor SafetensorsFile::load(const std::string& name) const {
  const TensorInfo& t = info(name);
  std::span<const uint8_t> src = bytes(name);
  return {t.name, t.dtype, t.shape, std::vector<uint8_t>(src.begin(), src.end())};
}

}  // namespace megatrain
