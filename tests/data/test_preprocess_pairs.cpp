// `megatrain preprocess --format prompt-completion` (data/preprocess.h): each JSONL line's prompt and
// completion become one document, encode(prompt) + encode(completion) + EOD, with the loss-mask
// companion learning the completion and the EOD only — checked token by token with the bytes
// tokenizer, whose encoding is the UTF-8 bytes themselves; the same bytes for any number of
// workers; every bad line named by FILE:LINE and its field, nothing left behind, or counted under
// --skip-bad-lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kBytesEod = 256;  // the bytes tokenizer's end-of-document id

class PromptCompletion : public ::testing::Test {
 public:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  PreprocessOptions options(const std::string& jsonl, const std::string& out) const {
    std::ofstream(path(out + ".jsonl"), std::ios::binary) << jsonl;
    PreprocessOptions o;
    o.inputs = {path(out + ".jsonl")};
    o.output_prefix = path(out);
    o.format = PreprocessFormat::prompt_completion;
    return o;
  }
  test::TempDir dir_{"pairs"};
};

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST_F(PromptCompletion, ThePromptIsReadTheCompletionAndItsEndLearned) {
  // The pairs as (prompt, completion) in the bytes of their UTF-8 text.
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"Q: 2+2?\n", "A: 4"}, {"", "only a completion"}, {"Übersetze: Katze", " → cat ✓"}};
  const std::string jsonl =
      "{\"prompt\": \"Q: 2+2?\\n\", \"completion\": \"A: 4\"}\n"
      "\n"
      "{\"completion\": \"only a completion\", \"prompt\": \"\"}\n"
      "{\"prompt\": \"\\u00dcbersetze: Katze\", \"completion\": \" → cat ✓\", \"id\": 7}\n";
  const PreprocessStats stats = preprocess(options(jsonl, "pc"));
  EXPECT_EQ(stats.documents, 3);
  const IndexedDataset ds = IndexedDataset::open(path("pc"));
  ASSERT_TRUE(ds.has_loss_mask());
  ASSERT_EQ(ds.num_documents(), 3);
  for (int64_t d = 0; d < 3; ++d) {
    const auto& [prompt, completion] = pairs[static_cast<size_t>(d)];
    std::vector<int32_t> want_tokens;
    std::vector<uint8_t> want_learned;
    for (unsigned char c : prompt) want_tokens.push_back(c), want_learned.push_back(0);
    for (unsigned char c : completion) want_tokens.push_back(c), want_learned.push_back(1);
    want_tokens.push_back(kBytesEod), want_learned.push_back(1);
    const int64_t n = ds.sequence_length(d), first = ds.sequence_start(d);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::vector<uint8_t> learned(static_cast<size_t>(n));
    ds.read_tokens(first, n, tokens.data());
    ds.read_loss_mask(first, n, learned.data());
    EXPECT_EQ(tokens, want_tokens) << "pair " << d;
    EXPECT_EQ(learned, want_learned) << "pair " << d;
  }
}

TEST_F(PromptCompletion, AnyNumberOfWorkersWritesTheSameBytes) {
  std::string jsonl;
  for (int i = 0; i < 200; ++i)
    jsonl += "{\"prompt\": \"prompt " + std::to_string(i) + std::string(static_cast<size_t>(i % 17), 'p') +
             "\", \"completion\": \"" + std::string(static_cast<size_t>(1 + i % 23), 'c') + "\"}\n";
  PreprocessOptions one = options(jsonl, "one"), many = options(jsonl, "many");
  one.batch_bytes = many.batch_bytes = 64;  // many small batches, so the workers finish out of order
  many.workers = 4;
  preprocess(one);
  preprocess(many);
  for (const char* ext : {".bin", ".idx", ".lossmask"})
    EXPECT_EQ(read_file(path("one") + ext), read_file(path("many") + ext)) << ext;
}

TEST_F(PromptCompletion, BadLinesNameFileLineAndFieldOrAreCounted) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"completion\": \"x\"}", "no key \"prompt\""},
      {"{\"prompt\": \"x\", \"completion\": 3}", "\"completion\""},
      {"{\"prompt\": \"x\", \"completion\": \"\"}", "\"completion\" holds an empty string"},
      {"[\"prompt\", \"completion\"]", "array"},
  };
  const std::string good = "{\"prompt\": \"p\", \"completion\": \"c\"}\n";
  for (const auto& [line, what] : bad) {
    const PreprocessOptions o = options(good + line + "\n" + good, "bad");
    const std::string msg = test::input_error_of([&] { preprocess(o); });
    EXPECT_CONTAINS(msg, o.inputs[0] + ":2");
    EXPECT_CONTAINS(msg, what);
    for (const char* ext : {".bin", ".idx", ".lossmask", ".bin.tmp", ".idx.tmp", ".lossmask.tmp"})
      EXPECT_FALSE(fs::exists(path("bad") + ext)) << line << ext;
  }
  PreprocessOptions o = options(good + bad[0].first + "\n" + good + bad[2].first + "\n", "skip");
  o.skip_bad_lines = true;
  const PreprocessStats stats = preprocess(o);
  EXPECT_EQ(stats.documents, 2);
  EXPECT_EQ(stats.skipped_lines, 2);
  EXPECT_TRUE(IndexedDataset::open(path("skip")).has_loss_mask());
}

TEST_F(PromptCompletion, OtherDocumentOptionsAreRefused) {
  PreprocessOptions o = options("{\"prompt\": \"p\", \"completion\": \"c\"}\n", "conflict");
  o.json_key = "text";
  EXPECT_CONTAINS(test::input_error_of([&] { preprocess(o); }), "drop --json-key");
}

}  // namespace
}  // namespace megatrain
