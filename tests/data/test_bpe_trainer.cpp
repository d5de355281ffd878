// Tests of byte-level BPE training: a hand-checked tiny corpus whose first merges are derived in
// a comment; a trained tokenizer.json that BpeTokenizer::load accepts, round-trips the corpus and
// random byte strings, and compresses the corpus; and the InputErrors (vocab too small, missing
// input file).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/bpe_trainer.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

class BpeTrainerTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  test::TempDir dir_{"bpe_trainer"};
};

// A corpus of English-like sentences over a small word list, with digits and punctuation.
std::string make_corpus() {
  const std::vector<std::string> words = {"the",   "model", "trains", "on",    "tokens", "and",  "learns",
                                          "merge", "pairs", "quickly", "data", "byte",   "level", "text"};
  std::mt19937 rng(1234);
  std::string out;
  for (int line = 0; line < 400; ++line) {
    const int n = 5 + static_cast<int>(rng() % 10);
    for (int i = 0; i < n; ++i) {
      if (i) out += ' ';
      out += words[rng() % words.size()];
    }
    out += (line % 7 == 0) ? ", 2024!\n" : ".\n";
  }
  return out;
}

TEST_F(BpeTrainerTest, TinyCorpusFirstMergesByHand) {
  // Words: "aaab" x1, " aaab" x2 (GPT-2 regex: ' ?\p{L}+'). Byte pairs: (a,a) 6, (a,b) 3,
  // (Ġ,a) 2 -> merge a+a. Then [aa a b]: (aa,a) 3 ties (a,b) 3; "a" < "aa" -> merge a+b.
  // Then [aa ab]: (aa,ab) 3 -> "aaab". Then (Ġ,aaab) 2 -> "Ġaaab". Then no pair occurs twice.
  BpeTrainOptions opts;
  opts.inputs = {write("tiny.txt", "aaab aaab aaab")};
  opts.vocab_size = 1000;
  const BpeTrainResult r = train_bpe(opts);
  using M = std::pair<std::string, std::string>;
  const std::vector<M> expected = {{"a", "a"}, {"a", "b"}, {"aa", "ab"}, {"\xC4\xA0", "aaab"}};
  EXPECT_EQ(r.merges, expected);
  ASSERT_EQ(r.vocab.size(), 260u);
  EXPECT_EQ(r.vocab[97], "a");
  EXPECT_EQ(r.vocab[256], "aa");
  EXPECT_EQ(r.vocab[259], "\xC4\xA0" "aaab");

  // vocab_size caps the merges: 256 bytes + 2 merges + 1 special.
  opts.vocab_size = 259;
  const BpeTrainResult capped = train_bpe(opts);
  EXPECT_EQ(capped.merges, std::vector<M>(expected.begin(), expected.begin() + 2));

  const std::string json_path = (dir_ / "tiny.json").string();
  write_bpe_tokenizer_json(r, json_path);
  EXPECT_FALSE(fs::exists(json_path + ".tmp"));
  const BpeTokenizer tok = BpeTokenizer::load(json_path);
  EXPECT_EQ(tok.vocab_size(), 261);
  EXPECT_EQ(tok.eod_id(), 260);
  EXPECT_EQ(tok.encode(" aaab"), (std::vector<int32_t>{259}));
  EXPECT_EQ(tok.encode("aaab<|endoftext|>"), (std::vector<int32_t>{258, 260}));
}

TEST_F(BpeTrainerTest, TrainedTokenizerLoadsRoundTripsAndCompresses) {
  const std::string corpus = make_corpus();
  BpeTrainOptions opts;
  opts.inputs = {write("a.txt", corpus.substr(0, corpus.size() / 2)), write("b.txt", corpus.substr(corpus.size() / 2))};
  opts.vocab_size = 300;  // the corpus runs out of repeated pairs at about 325
  opts.special_tokens = {"<|endoftext|>", "<|pad|>"};
  const BpeTrainResult r = train_bpe(opts);
  EXPECT_EQ(r.vocab.size() + r.special_tokens.size(), 300u);

  const std::string path = (dir_ / "tokenizer.json").string();
  write_bpe_tokenizer_json(r, path);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["added_tokens"].size(), 2u);
  EXPECT_EQ(j["added_tokens"][1]["id"], 299);

  const BpeTokenizer tok = BpeTokenizer::load(path);
  EXPECT_EQ(tok.vocab_size(), 300);
  EXPECT_EQ(tok.eod_id(), 298);
  EXPECT_EQ(tok.token_id("<|pad|>"), 299);
  const auto ids = tok.encode(corpus);
  EXPECT_EQ(tok.decode(ids), corpus);
  EXPECT_LT(ids.size() * 2, corpus.size()) << ids.size() << " tokens for " << corpus.size() << " bytes";

  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(i % 2 ? rng() % 256 : "the model \n.!2"[rng() % 14]);
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }

  // Deterministic: a second run gives the same merges.
  EXPECT_EQ(train_bpe(opts).merges, r.merges);
}

TEST_F(BpeTrainerTest, BadOptionsAreInputErrors) {
  BpeTrainOptions opts;
  opts.inputs = {write("c.txt", "hello world\n")};
  opts.vocab_size = 257;  // 256 bytes + 1 special leaves no room for a merge
  EXPECT_CONTAINS(test::input_error_of([&] { train_bpe(opts); }), "--vocab-size 257");
  opts.vocab_size = 258;
  EXPECT_NO_THROW(train_bpe(opts));

  const std::string missing = (dir_ / "no_such_file.txt").string();
  opts.inputs.push_back(missing);
  EXPECT_CONTAINS(test::input_error_of([&] { train_bpe(opts); }), missing);
}

}  // namespace
}  // namespace megatrain
