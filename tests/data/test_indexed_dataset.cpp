// Tests of the Megatron .bin/.idx format (byte-exact reader and writer, every rejected corruption),
// the byte tokenizer, and preprocess (text -> dataset, with and without --doc-separator).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

// Tests that write dataset files: a fresh folder per test, removed afterwards.
class DatasetFiles : public ::testing::Test {
 public:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  test::TempDir dir_{"data"};
};

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_text(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary);
  f << s;
}

Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Documents {5, 300, 256}, {65535, 0}, {7} as u16, laid out byte by byte as Megatron writes them.
const std::vector<std::vector<int32_t>> kDocs = {{5, 300, 256}, {65535, 0}, {7}};

Bytes hand_idx() {
  return {
      'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,  // magic
      1, 0, 0, 0, 0, 0, 0, 0,                   // version = 1
      8,                                        // dtype code 8 = u16
      3, 0, 0, 0, 0, 0, 0, 0,                   // sequence_count = 3
      4, 0, 0, 0, 0, 0, 0, 0,                   // document_count = 3 documents + 1
      3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0,       // sequence_lengths (int32)
      0, 0, 0, 0, 0, 0, 0, 0,                   // sequence_pointers (int64): 0,
      6, 0, 0, 0, 0, 0, 0, 0,                   //   3 tokens × 2 bytes,
      10, 0, 0, 0, 0, 0, 0, 0,                  //   5 tokens × 2 bytes
      0, 0, 0, 0, 0, 0, 0, 0,                   // document_indices (int64): 0,
      1, 0, 0, 0, 0, 0, 0, 0,                   //   1,
      2, 0, 0, 0, 0, 0, 0, 0,                   //   2,
      3, 0, 0, 0, 0, 0, 0, 0,                   //   3
  };
}

Bytes hand_bin() {
  return {0x05, 0x00, 0x2C, 0x01, 0x00, 0x01,  // 5, 300, 256
          0xFF, 0xFF, 0x00, 0x00,              // 65535, 0
          0x07, 0x00};                         // 7
}

constexpr size_t kPointersAt = 34 + 12, kDocIndicesAt = 34 + 36;

TEST_F(DatasetFiles, ReadsHandWrittenMegatronFiles) {
  write_bytes(path("hand.idx"), hand_idx());
  write_bytes(path("hand.bin"), hand_bin());
  auto ds = IndexedDataset::open(path("hand"));
  EXPECT_EQ(ds.dtype(), TokenDtype::u16);
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(ds.num_tokens(), 6);
  EXPECT_EQ(ds.sequence_length(0), 3);
  EXPECT_EQ(ds.sequence_length(1), 2);
  EXPECT_EQ(ds.sequence_length(2), 1);
  EXPECT_EQ(ds.sequence_start(2), 5);
  std::vector<int32_t> all(6);
  ds.read_tokens(0, 6, all.data());
  EXPECT_EQ(all, (std::vector<int32_t>{5, 300, 256, 65535, 0, 7}));
  std::vector<int32_t> mid(3);
  ds.read_tokens(2, 3, mid.data());
  EXPECT_EQ(mid, (std::vector<int32_t>{256, 65535, 0}));
}

TEST_F(DatasetFiles, WriterMatchesHandWrittenBytes) {
  IndexedDatasetWriter w(path("out"), TokenDtype::u16);
  for (const auto& d : kDocs) w.add_document(d);
  EXPECT_TRUE(fs::exists(path("out.bin.tmp")));
  EXPECT_FALSE(fs::exists(path("out.idx")));
  w.finalize();
  EXPECT_EQ(read_bytes(path("out.idx")), hand_idx());
  EXPECT_EQ(read_bytes(path("out.bin")), hand_bin());
  EXPECT_FALSE(fs::exists(path("out.bin.tmp")));
  EXPECT_FALSE(fs::exists(path("out.idx.tmp")));
}

TEST_F(DatasetFiles, UnfinalizedWriterLeavesNothing) {
  {
    IndexedDatasetWriter w(path("gone"), TokenDtype::u16);
    w.add_document(kDocs[0]);
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(DatasetFiles, EveryIntegerDtypeRoundTrips) {
  const std::vector<int32_t> toks = {0, 1, 7, 100, 127};
  for (TokenDtype dt : {TokenDtype::u8, TokenDtype::i8, TokenDtype::i16, TokenDtype::u16,
                        TokenDtype::i32, TokenDtype::i64}) {
    std::string prefix = path(std::string("dt_") + token_dtype_name(dt));
    IndexedDatasetWriter w(prefix, dt);
    w.add_document(std::span(toks).first(2));
    w.add_document(std::span(toks).subspan(2));
    w.finalize();
    auto ds = IndexedDataset::open(prefix);
    EXPECT_EQ(ds.dtype(), dt);
    EXPECT_EQ(fs::file_size(prefix + ".bin"), toks.size() * token_dtype_size(dt));
    std::vector<int32_t> back(toks.size());
    ds.read_tokens(0, static_cast<int64_t>(toks.size()), back.data());
    EXPECT_EQ(back, toks) << token_dtype_name(dt);
  }
}

TEST(TokenDtype, SmallestForVocab) {
  EXPECT_EQ(smallest_token_dtype(257), TokenDtype::u16);
  EXPECT_EQ(smallest_token_dtype(65535), TokenDtype::u16);
  EXPECT_EQ(smallest_token_dtype(65536), TokenDtype::i32);
}

// Opens `prefix` expecting InputError whose message names `file` and contains `what`.
void expect_rejected(const std::string& prefix, const std::string& file, const std::string& what) {
  const std::string msg = test::input_error_of([&] { IndexedDataset::open(prefix); });
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, what);
}

TEST_F(DatasetFiles, RejectsMissingFiles) {
  write_bytes(path("a.bin"), hand_bin());
  expect_rejected(path("a"), path("a.idx"), "megatrain preprocess");
  write_bytes(path("b.idx"), hand_idx());
  expect_rejected(path("b"), path("b.bin"), "megatrain preprocess");
}

// Writes hand_idx()/hand_bin() edited by `edit` under `name`, then expects InputError naming
// PREFIX + `file` (".idx" or ".bin") and containing `what`.
template <class Edit>
void check_bad(const DatasetFiles& t, const std::string& name, Edit edit, const std::string& what,
               const std::string& file = ".idx") {
  Bytes idx = hand_idx(), bin = hand_bin();
  edit(idx, bin);
  std::string prefix = t.path(name);
  write_bytes(prefix + ".idx", idx);
  write_bytes(prefix + ".bin", bin);
  SCOPED_TRACE(name);
  expect_rejected(prefix, prefix + file, what);
}

TEST_F(DatasetFiles, RejectsEveryCorruption) {
  check_bad(*this, "magic", [](Bytes& i, Bytes&) { i[0] = 'X'; }, "bad magic");
  check_bad(*this, "version", [](Bytes& i, Bytes&) { i[9] = 2; }, "unknown version 2");
  check_bad(*this, "dtype0", [](Bytes& i, Bytes&) { i[17] = 0; }, "unknown dtype code 0");
  check_bad(*this, "dtype9", [](Bytes& i, Bytes&) { i[17] = 9; }, "unknown dtype code 9");
  check_bad(*this, "f32", [](Bytes& i, Bytes&) { i[17] = 7; }, "dtype f32 is a floating-point");
  check_bad(*this, "f64", [](Bytes& i, Bytes&) { i[17] = 6; }, "dtype f64 is a floating-point");
  check_bad(*this, "short_header", [](Bytes& i, Bytes&) { i.resize(20); }, "truncated");
  check_bad(*this, "short_arrays", [](Bytes& i, Bytes&) { i.pop_back(); }, "truncated");
  check_bad(*this, "huge_count", [](Bytes& i, Bytes&) { i[25] = 0x7F; }, "truncated");
  check_bad(*this, "trailing", [](Bytes& i, Bytes&) { i.push_back(0); }, "trailing bytes");
  check_bad(*this, "pointer", [](Bytes& i, Bytes&) { i[kPointersAt + 8] = 4; },
                "sequence_pointers[1] = 4");
  check_bad(*this, "negative_len", [](Bytes& i, Bytes&) { i[34 + 7] = 0xFF; },
                "sequence_lengths[1]");
  check_bad(*this, "doc_start", [](Bytes& i, Bytes&) { i[kDocIndicesAt] = 1; },
                "document_indices[0]");
  check_bad(*this, "doc_end", [](Bytes& i, Bytes&) { i[kDocIndicesAt + 24] = 2; },
                "last document index");
  check_bad(*this, "bin_short", [](Bytes&, Bytes& b) { b.pop_back(); }, "11 bytes", ".bin");
  check_bad(*this, "bin_long", [](Bytes&, Bytes& b) { b.push_back(0); }, "13 bytes", ".bin");
}

TEST_F(DatasetFiles, WriterRejectsTokenOutsideDtype) {
  IndexedDatasetWriter w(path("narrow"), TokenDtype::u16);
  std::vector<int32_t> big = {65536};
  EXPECT_THROW(w.add_document(big), Error);
}

TEST(ByteTokenizer, RoundTripsBytesAndEod) {
  auto tok = make_tokenizer("bytes");
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_EQ(tok->eod_id(), 256);
  std::string text("h\xC3\xA9\0\xFF\n", 6);
  auto ids = tok->encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{'h', 0xC3, 0xA9, 0, 0xFF, '\n'}));
  EXPECT_EQ(tok->decode(ids), text);
  std::vector<int32_t> with_eod = {'a', 256};
  EXPECT_EQ(tok->decode(with_eod), "a<|endoftext|>");
  std::vector<int32_t> bad = {257};
  EXPECT_THROW(tok->decode(bad), InputError);
  EXPECT_THROW(make_tokenizer("gpt2"), InputError);
}

// The stream a dataset must hold: per document, its bytes then EOD.
std::vector<int32_t> expected_stream(const std::vector<std::string>& docs) {
  std::vector<int32_t> s;
  for (const auto& d : docs) {
    for (unsigned char c : d) s.push_back(c);
    s.push_back(256);
  }
  return s;
}

std::vector<int32_t> read_all(const IndexedDataset& ds) {
  std::vector<int32_t> out(static_cast<size_t>(ds.num_tokens()));
  ds.read_tokens(0, ds.num_tokens(), out.data());
  return out;
}

TEST_F(DatasetFiles, PreprocessWholeFilesAreDocuments) {
  write_text(path("one.txt"), "first file\nline two\n");
  write_text(path("empty.txt"), "");
  write_text(path("two.txt"), "no final newline");
  PreprocessOptions o;
  o.inputs = {path("one.txt"), path("empty.txt"), path("two.txt")};
  o.output_prefix = path("ds");
  auto stats = preprocess(o);
  const std::vector<std::string> docs = {"first file\nline two\n", "no final newline"};
  EXPECT_EQ(stats.documents, 2);
  EXPECT_EQ(stats.bytes, 36);
  EXPECT_EQ(stats.tokens, 38);
  auto ds = IndexedDataset::open(path("ds"));
  EXPECT_EQ(ds.dtype(), TokenDtype::u16);
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.sequence_length(0), 21);
  EXPECT_EQ(read_all(ds), expected_stream(docs));
}

TEST_F(DatasetFiles, PreprocessFortuneSeparator) {
  // Debian fortune layout: fortunes separated by a line "%"; an empty fortune; a "%" inside a
  // line is text; the last fortune has no final newline.
  write_text(path("fortunes"), "A fortune.\n  -- Someone\n%\n%\n100% sure\n%\n\nlast");
  write_text(path("more"), "%\nx\n");
  PreprocessOptions o;
  o.inputs = {path("fortunes"), path("more")};
  o.output_prefix = path("f");
  o.doc_separator = "%";
  auto stats = preprocess(o);
  const std::vector<std::string> docs = {"A fortune.\n  -- Someone\n", "100% sure\n", "\nlast", "x\n"};
  EXPECT_EQ(stats.documents, 4);
  auto ds = IndexedDataset::open(path("f"));
  EXPECT_EQ(ds.num_documents(), 4);
  EXPECT_EQ(read_all(ds), expected_stream(docs));
}

TEST_F(DatasetFiles, PreprocessMissingInputNamesIt) {
  PreprocessOptions o;
  o.inputs = {path("nope.txt")};
  o.output_prefix = path("x");
  EXPECT_CONTAINS(test::input_error_of([&] { preprocess(o); }), path("nope.txt"));
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace megatrain
