// Sample-index cache files (layout in sample_index_cache.h). Invariant: a file is used only when
// every byte was read, the key matches and the checksum over all of it agrees.
#include "data/sample_index_cache.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>
#include <system_error>

#include "kernels/fnv1a.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'M', 'T', 'S', 'M', 'P', 'I', 'D', 'X'};
constexpr uint64_t kVersion = 2;  // 2: blend index by Megatron's max(i, 1) rule (data/blended_dataset.h)

// Running checksum of a byte stream; each step is a bijection of the state, so any changed word
// changes the result.
struct Checksum {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w = 0;
      std::memcpy(&w, p, 8);
      h = ((h ^ w) * 0x100000001b3ull) + 0x2545f4914f6cdd1dull;
    }
    for (; n > 0; ++p, --n) h = (h ^ *p) * 0x100000001b3ull;
  }
};

class Writer {
 public:
  explicit Writer(std::FILE* f) : f_(f) {}
  void bytes(const void* p, size_t n) {
    if (n > 0 && ok_ && std::fwrite(p, 1, n, f_) != n) ok_ = false;
    sum_.add(p, n);
  }
  void u64(uint64_t v) { bytes(&v, 8); }
  template <class T>
  void array(const std::vector<T>& v) {
    u64(v.size());
    bytes(v.data(), v.size() * sizeof(T));
  }
  bool finish() {
    const uint64_t h = sum_.h;
    bytes(&h, 8);
    return ok_ && std::fflush(f_) == 0;
  }

 private:
  std::FILE* f_;
  Checksum sum_;
  bool ok_ = true;
};

class Reader {
 public:
  Reader(std::FILE* f, uint64_t size) : f_(f), left_(size) {}
  bool bytes(void* p, uint64_t n) {
    if (n > left_ || (n > 0 && std::fread(p, 1, n, f_) != n)) return false;
    left_ -= n;
    sum_.add(p, n);
    return true;
  }
  bool u64(uint64_t& v) { return bytes(&v, 8); }
  bool i64(int64_t& v) { return bytes(&v, 8); }
  template <class T>
  bool array(std::vector<T>& v) {
    uint64_t n = 0;
    if (!u64(n) || n > left_ / sizeof(T)) return false;  // never allocate more than the file holds
    v.resize(n);
    return bytes(v.data(), n * sizeof(T));
  }
  // The stored checksum matches and nothing follows it.
  bool finish() {
    const uint64_t expect = sum_.h;
    uint64_t stored = 0;
    return u64(stored) && stored == expect && left_ == 0;
  }

 private:
  std::FILE* f_;
  uint64_t left_;
  Checksum sum_;
};

bool read_set(Reader& r, const std::string& key, SampleIndexSet& out, std::string& problem) {
  char magic[8];
  uint64_t version = 0, key_len = 0, num = 0;
  if (!r.bytes(magic, 8) || std::memcmp(magic, kMagic, 8) != 0 || !r.u64(version) || version != kVersion) {
    problem = fmt::format("not a megatrain sample-index file of version {} (made by another megatrain version?)", kVersion);
    return false;
  }
  std::string stored(key.size(), '\0');
  if (!r.u64(key_len) || key_len != key.size() || !r.bytes(stored.data(), key_len) || stored != key) {
    problem = "made for other data or settings (key differs)";
    return false;
  }
  problem = "truncated or damaged";
  if (!r.u64(num) || num == 0 || num > 65535 || !r.array(out.blend.dataset) || !r.array(out.blend.sample)) return false;
  out.datasets.resize(num);
  for (GptSampleIndex& x : out.datasets)
    if (!r.i64(x.docs_per_epoch) || !r.i64(x.samples_per_epoch) || !r.i64(x.epochs) || !r.array(x.doc_idx) ||
        !r.array(x.sample_idx) || !r.array(x.shuffle_idx))
      return false;
  if (!r.finish()) {
    problem = "checksum mismatch, truncated or trailing bytes";
    return false;
  }
  problem.clear();
  return true;
}

}  // namespace

std::string sample_index_cache_path(const std::string& dir, const std::string& key) {
  return (fs::path(dir) / fmt::format("sample-index-{:016x}.bin", fnv1a(key))).string();
}

CacheRead read_sample_index_cache(const std::string& path, const std::string& key, SampleIndexSet& out,
                                  std::string& problem) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) {
    if (!fs::exists(path, ec)) return CacheRead::missing;
    problem = "cannot be sized: " + ec.message();
    return CacheRead::damaged;
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    problem = fmt::format("cannot be opened: {}", std::generic_category().message(errno));
    return CacheRead::damaged;
  }
  Reader r(f, size);
  const bool ok = read_set(r, key, out, problem);
  std::fclose(f);
  if (ok) return CacheRead::loaded;
  out = SampleIndexSet{};
  return CacheRead::damaged;
}

std::string write_sample_index_cache(const std::string& path, const std::string& key, const SampleIndexSet& set) {
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) return fmt::format("cannot create {}: {}", dir.string(), ec.message());
  const std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, getpid(), std::random_device{}());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return fmt::format("cannot create {}: {}", tmp, std::generic_category().message(errno));
  Writer w(f);
  w.bytes(kMagic, 8);
  w.u64(kVersion);
  w.u64(key.size());
  w.bytes(key.data(), key.size());
  w.u64(set.datasets.size());
  w.array(set.blend.dataset);
  w.array(set.blend.sample);
  for (const GptSampleIndex& x : set.datasets) {
    w.u64(static_cast<uint64_t>(x.docs_per_epoch));
    w.u64(static_cast<uint64_t>(x.samples_per_epoch));
    w.u64(static_cast<uint64_t>(x.epochs));
    w.array(x.doc_idx);
    w.array(x.sample_idx);
    w.array(x.shuffle_idx);
  }
  const bool written = w.finish();
  const int write_error = errno;
  const bool closed = std::fclose(f) == 0;
  const int err = written ? errno : write_error;
  if (!written || !closed) {
    fs::remove(tmp, ec);
    return fmt::format("cannot write {}: {}", tmp, std::generic_category().message(err));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return fmt::format("cannot rename {} to {}: {}", tmp, path, why);
  }
  return {};
}

}  // namespace megatrain
