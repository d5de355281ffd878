// The loss-mask companion (format in loss_mask.h). Invariant: open_beside() checks everything a
// read() relies on, so read() is a plain bit copy from the mapping.
#include "data/loss_mask.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kernels/check.h"
#include "kernels/fnv1a.h"

static_assert(std::endian::native == std::endian::little, "the .lossmask format is little-endian");

namespace megatrain {
namespace {

constexpr char kMagic[8] = {'M', 'T', 'L', 'M', 'A', 'S', 'K', 0};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 3 * 8;
constexpr const char* kFix =
    "re-run `megatrain preprocess` for this prefix, or delete the .lossmask to learn every token";

uint64_t header_field(const unsigned char* data, int i) {
  uint64_t v;
  std::memcpy(&v, data + 8 + 8 * i, 8);
  return v;
}

// FNV-1a 64 of a dataset's int32 sequence lengths, little-endian as the .idx stores them: what ties
// a companion to its documents.
uint64_t fingerprint(const void* lengths, size_t bytes) { return fnv1a(lengths, bytes); }

[[noreturn]] void write_failed(const std::string& path, int err) {
  throw DataError(fmt::format("{}: write failed ({}); check free disk space", path, std::strerror(err)));
}

}  // namespace

std::optional<LossMask> LossMask::open_beside(const std::string& prefix, int64_t num_tokens,
                                              std::span<const unsigned char> lengths) {
  const std::string path = prefix + ".lossmask";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  ReadOnlyMapping file = ReadOnlyMapping::map(path);
  const unsigned char* d = file.data();
  MT_DATA_CHECK(file.size() >= kHeaderBytes && std::memcmp(d, kMagic, sizeof(kMagic)) == 0,
                "{}: not a megatrain loss mask (bad magic or truncated header); {}", path, kFix);
  MT_DATA_CHECK(header_field(d, 0) == kVersion, "{}: version {} is not supported (this megatrain reads {}); {}", path,
                header_field(d, 0), kVersion, kFix);
  MT_DATA_CHECK(header_field(d, 1) == static_cast<uint64_t>(num_tokens),
                "{}: written for {} tokens, but {}.bin holds {}: it belongs to another dataset; {}", path,
                header_field(d, 1), prefix, num_tokens, kFix);
  MT_DATA_CHECK(header_field(d, 2) == fingerprint(lengths.data(), lengths.size()),
                "{}: written for other documents than {}.idx describes (their lengths differ); {}", path, prefix, kFix);
  const uint64_t bytes = (static_cast<uint64_t>(num_tokens) + 7) / 8;
  MT_DATA_CHECK(file.size() == kHeaderBytes + bytes, "{}: {} bytes, expected {} for {} tokens (damaged); {}", path,
                file.size(), kHeaderBytes + bytes, num_tokens, kFix);
  return LossMask(std::move(file));
}

void LossMask::read(int64_t first, int64_t count, uint8_t* out) const {
  const unsigned char* bits = file_.data() + kHeaderBytes;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = first + i;
    out[i] = static_cast<uint8_t>(bits[t >> 3] >> (t & 7) & 1);
  }
}

LossMaskWriter::LossMaskWriter(const std::string& prefix) : prefix_(prefix) {
  const std::string path = prefix_ + ".lossmask.tmp";
  file_ = std::fopen(path.c_str(), "wb");
  MT_DATA_CHECK(file_ != nullptr, "{}: cannot create ({}); check that the output prefix's directory is writable", path,
                std::strerror(errno));
  const unsigned char header[kHeaderBytes] = {};
  if (std::fwrite(header, 1, kHeaderBytes, file_) != kHeaderBytes) write_failed(path, errno);
}

LossMaskWriter::~LossMaskWriter() {
  if (finalized_) return;
  if (file_ != nullptr) std::fclose(file_);
  std::remove((prefix_ + ".lossmask.tmp").c_str());
}

void LossMaskWriter::add(std::span<const uint8_t> learned) {
  for (uint8_t l : learned) {
    byte_ = static_cast<uint8_t>(byte_ | (l != 0 ? 1u : 0u) << (tokens_ & 7));
    if ((++tokens_ & 7) == 0) {
      if (std::fputc(byte_, file_) == EOF) write_failed(prefix_ + ".lossmask.tmp", errno);
      byte_ = 0;
    }
  }
}

void LossMaskWriter::finalize(std::span<const int32_t> lengths) {
  MT_CHECK(!finalized_ && file_ != nullptr, "loss mask finalized twice");
  const std::string tmp = prefix_ + ".lossmask.tmp";
  if ((tokens_ & 7) != 0 && std::fputc(byte_, file_) == EOF) write_failed(tmp, errno);
  uint64_t header[3] = {kVersion, static_cast<uint64_t>(tokens_), fingerprint(lengths.data(), lengths.size_bytes())};
  const bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(kMagic, 1, 8, file_) == 8 &&
                  std::fwrite(header, 8, 3, file_) == 3;
  const int err = errno;
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0 || !ok) write_failed(tmp, err != 0 ? err : errno);
  if (std::rename(tmp.c_str(), (prefix_ + ".lossmask").c_str()) != 0) write_failed(prefix_ + ".lossmask", errno);
  finalized_ = true;
}

}  // namespace megatrain
