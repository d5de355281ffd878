// Tests of `megatrain preprocess` beyond the basics in test_indexed_dataset.cpp: JSONL input,
// blank-line documents, byte-identical output for any number of workers (small batches, so the
// workers really reorder), every bad-input case naming FILE:LINE with nothing left behind,
// --skip-bad-lines counting, and a small hand-built BPE tokenizer.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/data/byte_alphabet.h"
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
using nlohmann::json;

class PreprocessTest : public ::testing::Test {
 public:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  PreprocessOptions options(std::vector<std::string> inputs, const std::string& out) const {
    PreprocessOptions o;
    o.inputs = std::move(inputs);
    o.output_prefix = path(out);
    return o;
  }
  // preprocess must throw InputError whose message holds every one of `parts`, and leave no file
  // of the output prefix behind.
  void expect_error(const PreprocessOptions& o, const std::vector<std::string>& parts) const {
    const std::string msg = test::input_error_of([&] { preprocess(o); });
    for (const auto& part : parts) EXPECT_CONTAINS(msg, part);
    for (const auto& entry : fs::directory_iterator(dir_.path()))
      EXPECT_EQ(entry.path().string().rfind(o.output_prefix, 0), std::string::npos) << entry.path();
  }
  test::TempDir dir_{"preprocess"};
};

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<int32_t> read_all(const IndexedDataset& ds) {
  std::vector<int32_t> out(static_cast<size_t>(ds.num_tokens()));
  ds.read_tokens(0, ds.num_tokens(), out.data());
  return out;
}

std::vector<int32_t> expected_stream(const Tokenizer& tok, const std::vector<std::string>& docs) {
  std::vector<int32_t> s;
  for (const auto& d : docs) {
    auto ids = tok.encode(d);
    s.insert(s.end(), ids.begin(), ids.end());
    s.push_back(tok.eod_id());
  }
  return s;
}

TEST_F(PreprocessTest, JsonlDocumentsReadBack) {
  const std::vector<std::string> docs = {"first doc\nwith two lines\n", "caf\xC3\xA9 \xE2\x82\xAC", "\"quoted\"\t"};
  std::string text;
  for (const auto& d : docs) text += json{{"id", 1}, {"text", d}}.dump() + "\n";
  text += "\n";                                      // blank lines are ignored
  text += json{{"text", ""}}.dump() + "\r\n";      // empty document: skipped, not an error
  write("a.jsonl", text);
  auto o = options({path("a.jsonl")}, "ds");
  o.json_key = "text";
  auto stats = preprocess(o);
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.skipped_lines, 0);
  auto ds = IndexedDataset::open(path("ds"));
  EXPECT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(read_all(ds), expected_stream(ByteTokenizer{}, docs));
}

TEST_F(PreprocessTest, BlankLineDocuments) {
  write("a.txt", "\n\npara one\nline b\n\n  \t\n\r\npara two\r\n\npara three");
  write("b.txt", "next file\n");
  auto o = options({path("a.txt"), path("b.txt")}, "ds");
  o.blank_line_docs = true;
  auto stats = preprocess(o);
  const std::vector<std::string> docs = {"para one\nline b\n", "para two\r\n", "para three", "next file\n"};
  EXPECT_EQ(stats.documents, 4);
  EXPECT_EQ(read_all(IndexedDataset::open(path("ds"))), expected_stream(ByteTokenizer{}, docs));
}

// A few MB of seeded random documents (ASCII and multi-byte UTF-8), as text and as JSONL.
std::vector<std::string> random_docs(size_t total_bytes) {
  std::mt19937 rng(1234);
  const std::vector<std::string> pieces = {"the ", "quick ", "brown ", "fox\n", "caf\xC3\xA9 ", "\xE2\x82\xAC ",
                                           "\xF0\x9F\x98\x80", "12345 ", ". ", "\n"};
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < total_bytes) {
    std::string d = "doc" + std::to_string(docs.size()) + " ";
    const size_t len = std::uniform_int_distribution<size_t>(1, 4000)(rng);
    while (d.size() < len) d += pieces[rng() % pieces.size()];
    d += "\n";
    total += d.size();
    docs.push_back(std::move(d));
  }
  return docs;
}

TEST_F(PreprocessTest, WorkersGiveByteIdenticalOutput) {
  const auto docs = random_docs(size_t{3} << 20);
  std::string text, jsonl;
  for (const auto& d : docs) {
    text += d + "%\n";
    jsonl += json{{"text", d}}.dump() + "\n";
  }
  write("corpus.txt", text);
  write("corpus.jsonl", jsonl);
  for (bool use_json : {false, true}) {
    std::vector<std::string> bins, idxs;
    for (int workers : {1, 2, 4}) {
      const std::string out = "w" + std::to_string(workers) + (use_json ? "j" : "t");
      auto o = options({path(use_json ? "corpus.jsonl" : "corpus.txt")}, out);
      if (use_json) o.json_key = "text";
      else o.doc_separator = "%";
      o.workers = workers;
      o.batch_bytes = 64 << 10;  // ~50 batches, so workers finish out of order
      auto stats = preprocess(o);
      EXPECT_EQ(stats.documents, static_cast<int64_t>(docs.size()));
      bins.push_back(read_file(path(out + ".bin")));
      idxs.push_back(read_file(path(out + ".idx")));
    }
    EXPECT_EQ(read_all(IndexedDataset::open(path(use_json ? "w1j" : "w1t"))),
              expected_stream(ByteTokenizer{}, docs));
    for (size_t i = 1; i < bins.size(); ++i) {
      EXPECT_TRUE(bins[i] == bins[0]) << "json=" << use_json << " run " << i;
      EXPECT_TRUE(idxs[i] == idxs[0]) << "json=" << use_json << " run " << i;
    }
  }
  // Text and JSONL of the same documents give the same dataset.
  EXPECT_TRUE(read_file(path("w1t.bin")) == read_file(path("w1j.bin")));
  EXPECT_TRUE(read_file(path("w1t.idx")) == read_file(path("w1j.idx")));
}

TEST_F(PreprocessTest, MissingFileNamesIt) {
  write("ok.txt", "fine\n");
  auto o = options({path("ok.txt"), path("nope.txt")}, "ds");
  o.workers = 2;
  expect_error(o, {path("nope.txt"), "--input"});
}

TEST_F(PreprocessTest, BadJsonLinesNameFileAndLine) {
  const std::string good = json{{"text", "ok"}}.dump() + "\n";
  struct Case {
    std::string line, what;
  };
  const std::vector<Case> cases = {{"{\"text\": \"unterminated}", "invalid JSON"},
                                   {"[\"text\"]", "JSON object"},
                                   {"{\"body\": \"x\"}", "no key \"text\""},
                                   {"{\"text\": 5}", "not a string"},
                                   {"{\"text\": null}", "not a string"},
                                   {"{\"text\": \"bad \xFF byte\"}", "invalid UTF-8"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    const std::string in = write("bad.jsonl", good + good + c.line + "\n" + good);
    for (int workers : {1, 3}) {
      auto o = options({in}, "ds");
      o.json_key = "text";
      o.workers = workers;
      o.batch_bytes = 1;
      expect_error(o, {in + ":3", c.what, "--skip-bad-lines"});
    }
  }
}

TEST_F(PreprocessTest, InvalidUtf8InTextNamesFileAndLine) {
  const std::vector<std::string> bad = {"\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80",
                                        "ab\xE2\x82"};
  for (const auto& b : bad) {
    const std::string in = write("bad.txt", "line one\nline two\nx" + b + "y\nline four\n");
    for (bool blank : {false, true}) {
      auto o = options({in}, "ds");
      o.blank_line_docs = blank;  // whole-file and blank-line modes (bytes tokenizer)
      expect_error(o, {in + ":3", "invalid UTF-8", "--skip-bad-lines"});
    }
  }
}

TEST_F(PreprocessTest, SkipBadLinesCountsAndReports) {
  const auto j = [](const std::string& t) { return json{{"text", t}}.dump() + "\n"; };
  const std::string in = write("mixed.jsonl", j("one") + "not json\n" + j("two") + "{\"text\": 1}\n" +
                                                  "{\"x\": \"y\"}\n" + "\"str\"\n" + "{\"text\": \"\xFE\"}\n" +
                                                  "{\n" + j("three"));
  auto o = options({in}, "ds");
  o.json_key = "text";
  o.skip_bad_lines = true;
  o.workers = 2;
  auto stats = preprocess(o);
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.skipped_lines, 6);
  EXPECT_EQ(stats.skipped_first, (std::vector<std::string>{in + ":2", in + ":4", in + ":5", in + ":6", in + ":7"}));
  EXPECT_EQ(read_all(IndexedDataset::open(path("ds"))), expected_stream(ByteTokenizer{}, {"one", "two", "three"}));
  const std::string summary = preprocess_summary(stats);
  EXPECT_NE(summary.find("6 bad lines skipped"), std::string::npos) << summary;
  EXPECT_NE(summary.find(in + ":2"), std::string::npos) << summary;

  // Text mode: the bad line is dropped from its document.
  const std::string txt = write("t.txt", "a\nb\xFF\nc\n%\nd\n");
  auto t = options({txt}, "t");
  t.doc_separator = "%";
  t.skip_bad_lines = true;
  stats = preprocess(t);
  EXPECT_EQ(stats.skipped_lines, 1);
  EXPECT_EQ(stats.skipped_first, std::vector<std::string>{txt + ":2"});
  EXPECT_EQ(read_all(IndexedDataset::open(path("t"))), expected_stream(ByteTokenizer{}, {"a\nc\n", "d\n"}));
}

TEST_F(PreprocessTest, ConflictingOptionsAndNoDocuments) {
  write("a.txt", "x\n");
  auto o = options({path("a.txt")}, "ds");
  o.json_key = "text";
  o.doc_separator = "%";
  expect_error(o, {"--json-key"});
  o = options({path("a.txt")}, "ds");
  o.workers = 0;
  expect_error(o, {"--workers"});
  // Every line bad and skipped: no documents is still an error, and nothing is written.
  write("b.jsonl", "nope\n");
  o = options({path("b.jsonl")}, "ds");
  o.json_key = "text";
  o.skip_bad_lines = true;
  expect_error(o, {"no non-empty document"});
}

using test::sym;

TEST_F(PreprocessTest, BpeTokenizerFromFile) {
  // GPT-2 style: ids 0..255 are the byte symbols, merges 256 "he", 257 "Ġt", 258 "Ġthe"; 259 is
  // <|endoftext|>.
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[sym(static_cast<unsigned char>(b))] = b;
  const std::string sp = sym(' ');
  vocab["he"] = 256;
  vocab[sp + "t"] = 257;
  vocab[sp + "the"] = 258;
  const json model = {{"type", "BPE"},           {"dropout", nullptr},  {"unk_token", nullptr},
                      {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                      {"byte_fallback", false},  {"vocab", vocab},
                      {"merges", json::array({"h e", sp + " t", sp + "t he"})}};
  const json tok_json = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       json::array({{{"id", 259}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", model}};
  const std::string tok_path = write("tokenizer.json", tok_json.dump());
  auto tok = make_tokenizer(tok_path);
  ASSERT_EQ(tok->eod_id(), 259);
  EXPECT_EQ(tok->encode("he the"), (std::vector<int32_t>{256, 258}));

  std::vector<std::string> docs;
  std::string jsonl;
  for (int i = 0; i < 300; ++i) {
    docs.push_back("the theme " + std::to_string(i) + " caf\xC3\xA9\nhe said the end");
    jsonl += json{{"text", docs.back()}}.dump() + "\n";
  }
  write("c.jsonl", jsonl);
  std::string bin1;
  for (int workers : {1, 3}) {
    auto o = options({path("c.jsonl")}, "b" + std::to_string(workers));
    o.json_key = "text";
    o.tokenizer = tok_path;
    o.workers = workers;
    o.batch_bytes = 1000;
    auto stats = preprocess(o);
    EXPECT_EQ(stats.documents, 300);
    auto ds = IndexedDataset::open(o.output_prefix);
    EXPECT_EQ(ds.dtype(), TokenDtype::u16);
    EXPECT_EQ(read_all(ds), expected_stream(*tok, docs));
    if (workers == 1) bin1 = read_file(o.output_prefix + ".bin");
    else EXPECT_TRUE(read_file(o.output_prefix + ".bin") == bin1);
  }
}

}  // namespace
}  // namespace megatrain
