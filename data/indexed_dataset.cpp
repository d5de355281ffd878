// Megatron indexed dataset: mmap reader with full validation on open, and an atomic writer.
// Invariant: every check that could fail on a corrupt file runs in open(), so read_tokens() is a
// plain copy from the mapping (see the layout in indexed_dataset.h).
#include "data/indexed_dataset.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "data/loss_mask.h"
#include "data/read_only_mapping.h"
#include "kernels/check.h"

static_assert(std::endian::native == std::endian::little, "the .idx/.bin format is little-endian");

namespace megatrain {
namespace {

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, seq count, doc count
constexpr const char* kRecreate = "re-create it with `megatrain preprocess --input FILE... --output-prefix PREFIX`";

template <class T>
T load_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
void store_le(std::vector<unsigned char>& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

bool valid_dtype_code(uint8_t code) { return code >= 1 && code <= 8; }

template <class T>
void convert_tokens(const unsigned char* src, int64_t count, int32_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T v = load_le<T>(src + static_cast<size_t>(i) * sizeof(T));
    if constexpr (sizeof(T) > 4) {
      MT_DATA_CHECK(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(),
                     "i64 token {} does not fit int32; re-create the dataset with a 32-bit vocabulary", v);
    }
    out[i] = static_cast<int32_t>(v);
  }
}

}  // namespace

int token_dtype_size(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::u8: case TokenDtype::i8: return 1;
    case TokenDtype::i16: case TokenDtype::u16: return 2;
    case TokenDtype::i32: case TokenDtype::f32: return 4;
    case TokenDtype::i64: case TokenDtype::f64: return 8;
  }
  throw Error(fmt::format("unknown TokenDtype {}", static_cast<int>(dtype)));
}

const char* token_dtype_name(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::u8: return "u8";
    case TokenDtype::i8: return "i8";
    case TokenDtype::i16: return "i16";
    case TokenDtype::i32: return "i32";
    case TokenDtype::i64: return "i64";
    case TokenDtype::f64: return "f64";
    case TokenDtype::f32: return "f32";
    case TokenDtype::u16: return "u16";
  }
  return "?";
}

TokenDtype smallest_token_dtype(int64_t vocab_size) {
  MT_CHECK(vocab_size > 0, "vocab_size must be positive, got {}", vocab_size);
  return vocab_size < 65536 ? TokenDtype::u16 : TokenDtype::i32;
}

// ---------------------------------------------------------------------------------------------
// Reader

struct IndexedDataset::Impl {
  std::string prefix;
  ReadOnlyMapping idx, bin;
  std::optional<LossMask> loss_mask;  // PREFIX.lossmask, when it exists
  TokenDtype dtype = TokenDtype::u16;
  int itemsize = 2;
  int64_t sequence_count = 0, document_count = 0, num_tokens = 0;
  const unsigned char* lengths = nullptr;   // int32[sequence_count], unaligned
  const unsigned char* pointers = nullptr;  // int64[sequence_count], unaligned
  const unsigned char* doc_indices = nullptr;  // int64[document_count], unaligned
};

IndexedDataset IndexedDataset::open(const std::string& prefix) {
  auto impl = std::make_shared<Impl>();
  impl->prefix = prefix;
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  impl->idx = ReadOnlyMapping::map(idx_path);
  impl->bin = ReadOnlyMapping::map(bin_path);
  const unsigned char* p = impl->idx.data();
  const size_t size = impl->idx.size();

  // 1. Header.
  MT_DATA_CHECK(size >= kHeaderBytes, "{}: truncated: {} bytes, but the header alone is {}; {}",
                 idx_path, size, kHeaderBytes, kRecreate);
  MT_DATA_CHECK(std::memcmp(p, kMagic, sizeof(kMagic)) == 0,
                 "{}: bad magic (expected \"MMIDIDX\\0\\0\"): not a Megatron indexed dataset; {}",
                 idx_path, kRecreate);
  uint64_t version = load_le<uint64_t>(p + 9);
  MT_DATA_CHECK(version == kVersion, "{}: unknown version {} (only version 1 is supported); {}",
                 idx_path, version, kRecreate);
  uint8_t code = p[17];
  MT_DATA_CHECK(valid_dtype_code(code), "{}: unknown dtype code {} (known: 1..8); {}", idx_path,
                 static_cast<int>(code), kRecreate);
  impl->dtype = static_cast<TokenDtype>(code);
  MT_DATA_CHECK(impl->dtype != TokenDtype::f32 && impl->dtype != TokenDtype::f64,
                 "{}: dtype {} is a floating-point type, not token ids; {}", idx_path,
                 token_dtype_name(impl->dtype), kRecreate);
  impl->itemsize = token_dtype_size(impl->dtype);
  uint64_t seq = load_le<uint64_t>(p + 18), docs = load_le<uint64_t>(p + 26);

  // 2. Size implied by the counts (checked against overflow before multiplying).
  MT_DATA_CHECK(seq <= size / 12 && docs <= size / 8,
                 "{}: truncated: {} bytes cannot hold {} sequences and {} document indices; {}",
                 idx_path, size, seq, docs, kRecreate);
  const size_t expected = kHeaderBytes + 12 * seq + 8 * docs;
  MT_DATA_CHECK(size >= expected,
                 "{}: truncated: {} bytes, but {} sequences and {} document indices need {}; {}",
                 idx_path, size, seq, docs, expected, kRecreate);
  MT_DATA_CHECK(size == expected || size == expected + seq,
                 "{}: {} unexpected trailing bytes after the arrays; {}", idx_path, size - expected,
                 kRecreate);
  impl->sequence_count = static_cast<int64_t>(seq);
  impl->document_count = static_cast<int64_t>(docs);
  impl->lengths = p + kHeaderBytes;
  impl->pointers = impl->lengths + 4 * seq;
  const unsigned char* doc_indices = impl->pointers + 8 * seq;
  impl->doc_indices = doc_indices;

  // 3. Lengths and pointers: pointer[i] = itemsize × (sum of lengths before i).
  int64_t tokens = 0;
  for (int64_t i = 0; i < impl->sequence_count; ++i) {
    int32_t len = load_le<int32_t>(impl->lengths + 4 * i);
    int64_t ptr = load_le<int64_t>(impl->pointers + 8 * i);
    MT_DATA_CHECK(len >= 0, "{}: sequence_lengths[{}] = {} is negative; {}", idx_path, i, len, kRecreate);
    MT_DATA_CHECK(ptr == tokens * impl->itemsize,
                   "{}: sequence_pointers[{}] = {}, but the lengths before it imply byte {}; the .idx "
                   "is corrupt; {}", idx_path, i, ptr, tokens * impl->itemsize, kRecreate);
    tokens += len;
  }
  impl->num_tokens = tokens;

  // 4. Document indices: 0, non-decreasing, ending at sequence_count.
  MT_DATA_CHECK(docs >= 1, "{}: document_count is 0 (Megatron writes at least the leading 0); {}",
                 idx_path, kRecreate);
  int64_t prev = 0;
  for (int64_t d = 0; d < impl->document_count; ++d) {
    int64_t v = load_le<int64_t>(doc_indices + 8 * d);
    MT_DATA_CHECK((d == 0 ? v == 0 : v >= prev) && v <= impl->sequence_count,
                   "{}: document_indices[{}] = {} is out of order or range (sequence_count {}); {}",
                   idx_path, d, v, impl->sequence_count, kRecreate);
    prev = v;
  }
  MT_DATA_CHECK(prev == impl->sequence_count,
                 "{}: the last document index is {}, not sequence_count {}; {}", idx_path, prev,
                 impl->sequence_count, kRecreate);

  // 5. The .bin holds exactly the tokens the .idx describes.
  const uint64_t bin_expected = static_cast<uint64_t>(tokens) * impl->itemsize;
  MT_DATA_CHECK(impl->bin.size() == bin_expected,
                 "{}: {} bytes, but {} says {} {} tokens = {} bytes; the pair does not belong "
                 "together or a copy was cut short; {}", bin_path, impl->bin.size(), idx_path, tokens,
                 token_dtype_name(impl->dtype), bin_expected, kRecreate);

  // 6. The loss-mask companion, when there is one, belongs to these documents.
  impl->loss_mask = LossMask::open_beside(prefix, tokens, {impl->lengths, static_cast<size_t>(4 * seq)});
  return IndexedDataset(std::move(impl));
}

const std::string& IndexedDataset::prefix() const { return impl_->prefix; }
TokenDtype IndexedDataset::dtype() const { return impl_->dtype; }
int64_t IndexedDataset::num_sequences() const { return impl_->sequence_count; }
int64_t IndexedDataset::num_documents() const { return impl_->document_count - 1; }
int64_t IndexedDataset::num_tokens() const { return impl_->num_tokens; }

int64_t IndexedDataset::sequence_length(int64_t i) const {
  MT_CHECK(i >= 0 && i < impl_->sequence_count, "sequence {} out of range [0, {})", i, impl_->sequence_count);
  return load_le<int32_t>(impl_->lengths + 4 * i);
}

std::pair<int64_t, int64_t> IndexedDataset::document_sequences(int64_t d) const {
  MT_CHECK(d >= 0 && d < num_documents(), "document {} out of range [0, {})", d, num_documents());
  return {load_le<int64_t>(impl_->doc_indices + 8 * d), load_le<int64_t>(impl_->doc_indices + 8 * (d + 1))};
}

int64_t IndexedDataset::sequence_start(int64_t i) const {
  MT_CHECK(i >= 0 && i < impl_->sequence_count, "sequence {} out of range [0, {})", i, impl_->sequence_count);
  return load_le<int64_t>(impl_->pointers + 8 * i) / impl_->itemsize;
}

void IndexedDataset::read_tokens(int64_t first_token, int64_t count, int32_t* out) const {
  MT_CHECK(first_token >= 0 && count >= 0 && first_token <= impl_->num_tokens - count,
           "tokens [{}, {}) out of range [0, {})", first_token, first_token + count, impl_->num_tokens);
  if (count == 0) return;
  const unsigned char* src = impl_->bin.data() + static_cast<size_t>(first_token) * impl_->itemsize;
  switch (impl_->dtype) {
    case TokenDtype::u8: return convert_tokens<uint8_t>(src, count, out);
    case TokenDtype::i8: return convert_tokens<int8_t>(src, count, out);
    case TokenDtype::i16: return convert_tokens<int16_t>(src, count, out);
    case TokenDtype::u16: return convert_tokens<uint16_t>(src, count, out);
    case TokenDtype::i32: std::memcpy(out, src, static_cast<size_t>(count) * 4); return;
    case TokenDtype::i64: return convert_tokens<int64_t>(src, count, out);
    case TokenDtype::f32: case TokenDtype::f64: break;
  }
  MT_CHECK(false, "dtype {} passed validation", token_dtype_name(impl_->dtype));
}

bool IndexedDataset::has_loss_mask() const { return impl_->loss_mask.has_value(); }

void IndexedDataset::read_loss_mask(int64_t first_token, int64_t count, uint8_t* out) const {
  MT_CHECK(first_token >= 0 && count >= 0 && first_token <= impl_->num_tokens - count,
           "tokens [{}, {}) out of range [0, {})", first_token, first_token + count, impl_->num_tokens);
  if (impl_->loss_mask)
    impl_->loss_mask->read(first_token, count, out);
  else
    std::fill_n(out, count, uint8_t{1});
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

[[noreturn]] void write_failed(const std::string& path, int err) {
  throw Error(fmt::format("{}: write failed ({}); check free disk space and permissions", path,
                          std::strerror(err)));
}

template <class T>
void pack_tokens(std::span<const int32_t> tokens, TokenDtype dtype, std::vector<unsigned char>& out) {
  out.resize(tokens.size() * sizeof(T));
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t v = tokens[i];
    MT_CHECK(static_cast<int64_t>(v) >= std::numeric_limits<T>::min() &&
                 static_cast<int64_t>(v) <= static_cast<int64_t>(std::numeric_limits<T>::max()),
             "token {} does not fit dtype {}; pass a wider dtype (smallest_token_dtype(vocab))", v,
             token_dtype_name(dtype));
    T t = static_cast<T>(v);
    std::memcpy(out.data() + i * sizeof(T), &t, sizeof(T));
  }
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDtype dtype, bool loss_mask)
    : prefix_(prefix), dtype_(dtype) {
  MT_CHECK(valid_dtype_code(static_cast<uint8_t>(dtype)) && dtype != TokenDtype::f32 &&
               dtype != TokenDtype::f64,
           "token dtype must be an integer type, got code {}", static_cast<int>(dtype));
  const std::string path = prefix_ + ".bin.tmp";
  bin_ = std::fopen(path.c_str(), "wb");
  MT_DATA_CHECK(bin_ != nullptr, "{}: cannot create ({}); check that the output prefix's directory "
                 "exists and is writable", path, std::strerror(errno));
  if (loss_mask) mask_ = std::make_unique<LossMaskWriter>(prefix_);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (finalized_) return;
  if (bin_ != nullptr) std::fclose(bin_);
  std::remove((prefix_ + ".bin.tmp").c_str());
  std::remove((prefix_ + ".idx.tmp").c_str());
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  MT_CHECK(mask_ == nullptr, "this writer writes a loss mask: pass each document's learned flags");
  append(tokens);
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens, std::span<const uint8_t> learned) {
  MT_CHECK(mask_ != nullptr, "this writer writes no loss mask: construct it with loss_mask = true");
  MT_CHECK(learned.size() == tokens.size(), "{} learned flags for a document of {} tokens", learned.size(),
           tokens.size());
  append(tokens);
  mask_->add(learned);
}

void IndexedDatasetWriter::append(std::span<const int32_t> tokens) {
  MT_CHECK(!finalized_ && bin_ != nullptr, "add_document after finalize");
  MT_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
           "a document of {} tokens exceeds the format's int32 sequence length", tokens.size());
  switch (dtype_) {
    case TokenDtype::u8: pack_tokens<uint8_t>(tokens, dtype_, scratch_); break;
    case TokenDtype::i8: pack_tokens<int8_t>(tokens, dtype_, scratch_); break;
    case TokenDtype::i16: pack_tokens<int16_t>(tokens, dtype_, scratch_); break;
    case TokenDtype::u16: pack_tokens<uint16_t>(tokens, dtype_, scratch_); break;
    case TokenDtype::i32: pack_tokens<int32_t>(tokens, dtype_, scratch_); break;
    case TokenDtype::i64: pack_tokens<int64_t>(tokens, dtype_, scratch_); break;
    case TokenDtype::f32: case TokenDtype::f64: MT_CHECK(false, "float token dtype");
  }
  if (!scratch_.empty() && std::fwrite(scratch_.data(), 1, scratch_.size(), bin_) != scratch_.size())
    write_failed(prefix_ + ".bin.tmp", errno);
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetWriter::finalize() {
  MT_CHECK(!finalized_ && bin_ != nullptr, "finalize called twice");
  const std::string bin_tmp = prefix_ + ".bin.tmp", idx_tmp = prefix_ + ".idx.tmp";
  std::FILE* bin = bin_;
  bin_ = nullptr;
  if (std::fclose(bin) != 0) write_failed(bin_tmp, errno);

  const uint64_t n = lengths_.size();
  std::vector<unsigned char> idx;
  idx.reserve(kHeaderBytes + 12 * n + 8 * (n + 1));
  idx.insert(idx.end(), kMagic, kMagic + sizeof(kMagic));
  store_le<uint64_t>(idx, kVersion);
  store_le<uint8_t>(idx, static_cast<uint8_t>(dtype_));
  store_le<uint64_t>(idx, n);      // sequence_count
  store_le<uint64_t>(idx, n + 1);  // document_count: leading 0 + one end per document
  for (int32_t len : lengths_) store_le<int32_t>(idx, len);
  int64_t offset = 0;
  for (int32_t len : lengths_) {
    store_le<int64_t>(idx, offset);
    offset += static_cast<int64_t>(len) * token_dtype_size(dtype_);
  }
  for (uint64_t d = 0; d <= n; ++d) store_le<int64_t>(idx, static_cast<int64_t>(d));

  std::FILE* f = std::fopen(idx_tmp.c_str(), "wb");
  MT_DATA_CHECK(f != nullptr, "{}: cannot create ({}); check that the output prefix's directory is "
                 "writable", idx_tmp, std::strerror(errno));
  bool ok = std::fwrite(idx.data(), 1, idx.size(), f) == idx.size();
  int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) write_failed(idx_tmp, err != 0 ? err : errno);

  // .bin first: a crash between the renames leaves a new .bin beside an old .idx, which open()
  // rejects unless the two happen to describe the same number of bytes. The loss mask goes before
  // the .idx too (a stale one is removed): any crash leaves a companion its .idx refuses or none.
  if (std::rename(bin_tmp.c_str(), (prefix_ + ".bin").c_str()) != 0) write_failed(prefix_ + ".bin", errno);
  if (mask_ != nullptr)
    mask_->finalize(lengths_);
  else if (std::remove((prefix_ + ".lossmask").c_str()) != 0 && errno != ENOENT)
    write_failed(prefix_ + ".lossmask", errno);
  if (std::rename(idx_tmp.c_str(), (prefix_ + ".idx").c_str()) != 0) write_failed(prefix_ + ".idx", errno);
  finalized_ = true;
}

}  // namespace megatrain
