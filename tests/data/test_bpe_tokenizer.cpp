// Tests of the Hugging Face byte-level BPE tokenizer: fixed ids on two small hand-built
// tokenizer.json files (GPT-2 style and Llama-3 style), each id derived by hand in a comment;
// a seeded 10k-string round-trip fuzz per file (invalid UTF-8 and special-token-like text
// included); and every rejected file, whose InputError must name the path.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/data/byte_alphabet.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

using test::sym;

const std::string kSpace = sym(' '), kNewline = sym('\n');  // "Ġ", "Ċ"

// Vocab with id b for the symbol of byte b, plus one id per merge (256, 257, ... in order).
json make_model(const std::vector<std::pair<std::string, std::string>>& merges, bool pair_form) {
  json vocab = json::object(), list = json::array();
  for (int b = 0; b < 256; ++b) vocab[sym(static_cast<unsigned char>(b))] = b;
  for (const auto& [l, r] : merges) {
    vocab[l + r] = static_cast<int>(vocab.size());
    list.push_back(pair_form ? json::array({l, r}) : json(l + " " + r));
  }
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", ""},
          {"end_of_word_suffix", ""},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", vocab},
          {"merges", list}};
}

json added_token(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// GPT-2 style: ByteLevel(use_regex) pre-tokenizer, merges as "a b" strings. Ids: 0..255 bytes;
// merges 256 "Ġt", 257 "he", 258 "Ġthe", 259 "in", 260 "ll", 261 "'ll", 262 "12", 263 "ĠĠ",
// 264 "ĊĊ", 265 "Ã©" (é = C3 A9), 266 "aa"; added 267 <|endoftext|> (special), 268 "<|end".
json gpt2_json() {
  json model = make_model({{kSpace, "t"},
                           {"h", "e"},
                           {kSpace + "t", "he"},
                           {"i", "n"},
                           {"l", "l"},
                           {"'", "ll"},
                           {"1", "2"},
                           {kSpace, kSpace},
                           {kNewline, kNewline},
                           {sym(0xC3), sym(0xA9)},
                           {"a", "a"}},
                          /*pair_form=*/false);
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {added_token(267, "<|endoftext|>", true), added_token(268, "<|end", false)}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", model}};
}

// Llama-3 style: Sequence[Split(tiktoken regex, Isolated), ByteLevel(use_regex=false)], merges as
// pairs, ignore_merges. Ids: 0..255 bytes; merges 256 "Ġt", 257 "he", 258 "Ġthe", 259 "12",
// 260 "123", 261 "'s", 262 "ĊĊ", 263 "ĠĠ", 264 "Ã©"; 265 "hello" (a vocab entry no merge makes);
// added 266 <|begin_of_text|>, 267 <|end_of_text|>.
const char* kTiktokenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
json llama3_json() {
  json model = make_model({{kSpace, "t"},
                           {"h", "e"},
                           {kSpace + "t", "he"},
                           {"1", "2"},
                           {"12", "3"},
                           {"'", "s"},
                           {kNewline, kNewline},
                           {kSpace, kSpace},
                           {sym(0xC3), sym(0xA9)}},
                          /*pair_form=*/true);
  model["vocab"]["hello"] = 265;
  model["ignore_merges"] = true;
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", kTiktokenPattern}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", false}};
  return {
      {"added_tokens",
       {added_token(266, "<|begin_of_text|>", true), added_token(267, "<|end_of_text|>", true)}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
      {"model", model}};
}

class BpeTokenizerTest : public ::testing::Test {
 public:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  BpeTokenizer load(const json& j) { return BpeTokenizer::load(write("tokenizer.json", j.dump())); }
  test::TempDir dir_{"bpe"};
};

TEST_F(BpeTokenizerTest, Gpt2StyleFixedIds) {
  const BpeTokenizer tok = load(gpt2_json());
  EXPECT_EQ(tok.vocab_size(), 269);
  EXPECT_EQ(tok.eod_id(), 267);
  EXPECT_EQ(tok.encode(""), Ids{});
  // Pieces "the", " theme". "the": (h,e) rank 1 -> [t, he]. " theme": (Ġ,t) rank 0 -> Ġt;
  // (h,e) rank 1 -> he; (Ġt,he) rank 2 -> Ġthe; "me" has no merge.
  EXPECT_EQ(tok.encode("the theme"), (Ids{116, 257, 258, 109, 101}));
  // Contractions: "we" + "'ll"; (l,l) -> ll, then (',ll) -> 'll. "I" + "'m", no merge.
  EXPECT_EQ(tok.encode("we'll"), (Ids{119, 101, 261}));
  EXPECT_EQ(tok.encode("I'm"), (Ids{73, 39, 109}));
  // GPT-2 keeps digit runs whole: "12345" -> (1,2) -> [12, 3, 4, 5].
  EXPECT_EQ(tok.encode("12345"), (Ids{262, 51, 52, 53}));
  // "going": (i,n) -> in.
  EXPECT_EQ(tok.encode("going"), (Ids{103, 111, 259, 103}));
  // Three spaces before a letter: \s+(?!\S) takes two ("ĠĠ" = 263), " b" keeps the third.
  EXPECT_EQ(tok.encode("a   b"), (Ids{97, 263, 32, 98}));
  // "\n\n" before a letter: \s+(?!\S) takes one newline, \s+ the other; no ĊĊ merge.
  EXPECT_EQ(tok.encode("x\n\ny"), (Ids{120, 10, 10, 121}));
  // At the end of the text both newlines form one piece -> ĊĊ = 264.
  EXPECT_EQ(tok.encode("x\n\n"), (Ids{120, 264}));
  // Non-ASCII: "café" (é = C3 A9 -> Ã© = 265), " 中文" (letters, E4 B8 AD E6 96 87, no merges),
  // " 😀!" (neither letter nor digit: one piece, F0 9F 98 80 then '!').
  EXPECT_EQ(tok.encode("café 中文 😀!"),
            (Ids{99, 97, 102, 265, 32, 228, 184, 173, 230, 150, 135, 32, 240, 159, 152, 128, 33}));
  // Equal ranks merge leftmost first: aaaaa -> [aa, a, a, a] -> [aa, aa, a].
  EXPECT_EQ(tok.encode("aaaaa"), (Ids{266, 266, 97}));
  // Added tokens split the text before the regex: "a" | 267 | "b"; " the" -> Ġthe.
  EXPECT_EQ(tok.encode("a<|endoftext|>b"), (Ids{97, 267, 98}));
  EXPECT_EQ(tok.encode(" the<|endoftext|>the"), (Ids{258, 267, 116, 257}));
  // Leftmost-longest: at 0 only "<|end" matches (268); at 5 both do and the longer (267) wins.
  EXPECT_EQ(tok.encode("<|end<|endoftext|>"), (Ids{268, 267}));
  // An unterminated special token: "<|end" (268), then "oftext" (letters) and "|".
  EXPECT_EQ(tok.encode("<|endoftext|"), (Ids{268, 111, 102, 116, 101, 120, 116, 124}));
  EXPECT_EQ(tok.decode(Ids{268, 267, 258, 265}), "<|end<|endoftext|> theé");
  EXPECT_EQ(tok.token_id(kSpace + "the"), 258);
  EXPECT_THROW(tok.decode(Ids{269}), InputError);
  EXPECT_THROW(tok.decode(Ids{-1}), InputError);
}

TEST_F(BpeTokenizerTest, Llama3StyleFixedIds) {
  const BpeTokenizer tok = load(llama3_json());
  EXPECT_EQ(tok.vocab_size(), 268);
  EXPECT_EQ(tok.eod_id(), 267);  // <|end_of_text|>
  // ignore_merges: "hello" is a vocab entry and stays whole; " hello" is not, so it is merged:
  // (h,e) -> he, nothing else applies.
  EXPECT_EQ(tok.encode("hello hello"), (Ids{265, 32, 257, 108, 108, 111}));
  // \p{N}{1,3}: "12345" -> "123" ((1,2) -> 12, (12,3) -> 123 = 260) + "45".
  EXPECT_EQ(tok.encode("12345"), (Ids{260, 52, 53}));
  EXPECT_EQ(tok.encode("1234567"), (Ids{260, 52, 53, 54, 55}));
  // Case-insensitive contractions: "it" + "'s" (261) + " IT" + "'S" (no 'S merge).
  EXPECT_EQ(tok.encode("it's IT'S"), (Ids{105, 116, 261, 32, 73, 84, 39, 83}));
  // Punctuation takes the newlines after it: ".\n\n" -> [., ĊĊ]; then "Next".
  EXPECT_EQ(tok.encode("end.\n\nNext"), (Ids{101, 110, 100, 46, 262, 78, 101, 120, 116}));
  // Spaces: as GPT-2, "  " (263) then " b".
  EXPECT_EQ(tok.encode("a   b"), (Ids{97, 263, 32, 98}));
  // \s*[\r\n]+ takes " \n\n" (Ġ, ĊĊ); " b" follows.
  EXPECT_EQ(tok.encode("a \n\n b"), (Ids{97, 32, 262, 32, 98}));
  // "\n\n\n" is one piece; (Ċ,Ċ) leftmost first -> [ĊĊ, Ċ].
  EXPECT_EQ(tok.encode("\n\n\n"), (Ids{262, 10}));
  // "café", " 中文" (letters with a leading space), " 😀" (symbol with a leading space).
  EXPECT_EQ(tok.encode("café 中文 😀"),
            (Ids{99, 97, 102, 264, 32, 228, 184, 173, 230, 150, 135, 32, 240, 159, 152, 128}));
  // Special tokens around "the" ((h,e) -> he; no (t,he) merge); " the" is the vocab entry 258.
  EXPECT_EQ(tok.encode("<|begin_of_text|>the<|end_of_text|>"), (Ids{266, 116, 257, 267}));
  EXPECT_EQ(tok.encode(" the"), (Ids{258}));
}

TEST_F(BpeTokenizerTest, PrefixSpaceAndDigitsPreTokenizers) {
  json j = gpt2_json();
  j["pre_tokenizer"]["add_prefix_space"] = true;  // every piece between added tokens gets ' '
  const BpeTokenizer spaced = load(j);
  EXPECT_EQ(spaced.encode("the<|endoftext|>the"), (Ids{258, 267, 258}));
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Digits"}, {"individual_digits", true}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const BpeTokenizer digits = load(j);  // one digit per piece: no (1,2) merge
  EXPECT_EQ(digits.encode("a12b"), (Ids{97, 49, 50, 98}));
}

// Random byte strings: arbitrary bytes, truncated UTF-8, and fragments near the special tokens.
std::string random_text(std::mt19937& rng) {
  static const std::vector<std::string> fragments = {"<|endoftext|>",
                                                     "<|end_of_text|>",
                                                     "<|begin_of_text|>",
                                                     "<|end",
                                                     "<|",
                                                     "|>",
                                                     "<|endoftext",
                                                     "'s",
                                                     "'LL",
                                                     " the",
                                                     "\n\n",
                                                     "   ",
                                                     "\r\n",
                                                     "\t",
                                                     "é",
                                                     "中文",
                                                     "😀",
                                                     "123456",
                                                     "aaa",
                                                     "\xE4\xB8",
                                                     "\xF0\x9F",
                                                     "\xC3",
                                                     "\x80",
                                                     "\xFF\xFE",
                                                     std::string("\0a", 2)};
  std::uniform_int_distribution<int> len(0, 24), kind(0, 3), byte(0, 255), ascii(0x20, 0x7E);
  std::uniform_int_distribution<size_t> pick(0, fragments.size() - 1);
  std::string s;
  for (int i = len(rng); i > 0; --i) {
    switch (kind(rng)) {
      case 0:
        s += static_cast<char>(byte(rng));
        break;
      case 1:
        s += fragments[pick(rng)];
        break;
      default:
        s += static_cast<char>(ascii(rng));
        break;
    }
  }
  return s;
}

TEST_F(BpeTokenizerTest, RoundTripFuzz) {
  for (const json& j : {gpt2_json(), llama3_json()}) {
    const BpeTokenizer tok = load(j);
    std::mt19937 rng(20240611);
    for (int i = 0; i < 10000; ++i) {
      const std::string text = random_text(rng);
      const Ids ids = tok.encode(text);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << id;
      ASSERT_EQ(tok.decode(ids), text) << "case " << i;
      ASSERT_EQ(tok.encode(text), ids) << "case " << i;  // the cached path agrees
    }
  }
}

TEST_F(BpeTokenizerTest, ConcurrentEncodeAgrees) {
  const BpeTokenizer tok = load(llama3_json());
  std::mt19937 rng(7);
  std::vector<std::string> texts(2000);
  for (auto& t : texts) t = random_text(rng);
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&] {
      for (size_t i = 0; i < texts.size(); ++i)
        if (tok.encode(texts[i]) != expected[i]) ++mismatches;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(BpeTokenizerTest, MakeTokenizerLoadsAPath) {
  const std::string path = write("tok.json", gpt2_json().dump());
  auto tok = make_tokenizer(path);
  EXPECT_EQ(tok->eod_id(), 267);
  EXPECT_EQ(tok->encode("the"), (Ids{116, 257}));
  EXPECT_EQ(make_tokenizer("bytes")->vocab_size(), 257);
}

// Loading `text` as a tokenizer file throws InputError naming the path and containing `what`.
void expect_rejected(BpeTokenizerTest& t, const std::string& text, const std::string& what) {
  const std::string path = t.write("bad_tokenizer.json", text);
  const std::string msg = test::input_error_of([&] { make_tokenizer(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, what);
}

// Qwen's normalizer: NFC after the normalized=false added tokens are split off, before the
// normalized=true ones are matched (Hugging Face's order); ids against transformers with a trained
// Qwen2-shaped tokenizer in tests/reference/tokenizer_reference.py.
TEST_F(BpeTokenizerTest, TheNfcNormalizerComposesBetweenTheTwoKindsOfAddedTokens) {
  const std::string decomposed = "e\xCC\x81", composed = "\xC3\xA9";  // e + U+0301, é
  json j = llama3_json();
  const Ids plain = load(j).encode(decomposed);
  EXPECT_EQ(plain.size(), 3u);  // e, CC, 81: without a normalizer the bytes stay as they are
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  json normalized_token = added_token(268, "x" + composed, false);
  normalized_token["normalized"] = true;
  j["added_tokens"].push_back(added_token(269, "!" + decomposed, false));  // matched on the raw text
  j["added_tokens"].push_back(normalized_token);                        // matched on the NFC text
  const BpeTokenizer nfc = load(j);
  EXPECT_EQ(nfc.encode(decomposed), Ids{264});
  EXPECT_EQ(nfc.normalize("a" + decomposed), "a" + composed);
  EXPECT_EQ(nfc.encode("x" + decomposed), Ids{268});
  EXPECT_EQ(nfc.encode("!" + decomposed), Ids{269});
  EXPECT_EQ(nfc.decode(nfc.encode("h" + decomposed + "llo")), "h" + composed + "llo");
  EXPECT_CONTAINS(test::input_error_of([&] { nfc.encode("ok \xFF"); }), "normalizer NFC: the text is not valid UTF-8");
}

TEST_F(BpeTokenizerTest, BadFilesAreInputErrors) {
  const std::string missing = (dir_ / "no_such_tokenizer.json").string();
  EXPECT_CONTAINS(test::input_error_of([&] { make_tokenizer(missing); }), missing);
  EXPECT_THROW(BpeTokenizer::load(missing), InputError);
  expect_rejected(*this, "{\"model\": {\"type\": \"BPE\",", "not valid JSON");
  json j = gpt2_json();
  j["model"]["type"] = "WordPiece";
  expect_rejected(*this, j.dump(), "model.type");
  j = gpt2_json();
  j["model"]["merges"].push_back("x zz");  // "zz" is not a token
  expect_rejected(*this, j.dump(), "\"zz\"");
  j = llama3_json();
  j["model"]["merges"].push_back(json::array({"q", "hello"}));  // "qhello" is not a token
  expect_rejected(*this, j.dump(), "model.merges[9]");
  j = gpt2_json();
  j["model"]["vocab"].erase(sym(0));
  expect_rejected(*this, j.dump(), "byte 0x00");
  j = llama3_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_rejected(*this, j.dump(), "does not compile");
  j = llama3_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_rejected(*this, j.dump(), "behavior");
  j = gpt2_json();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_rejected(*this, j.dump(), "the only normalizer supported is NFC");
  j = gpt2_json();
  j["added_tokens"] = json::array();
  j["model"]["vocab"].erase("aa");  // the merge (a, a) now names a missing token
  expect_rejected(*this, j.dump(), "\"aa\"");
  j = gpt2_json();
  j["added_tokens"] = json::array();
  const BpeTokenizer no_eod = load(j);
  EXPECT_THROW(no_eod.eod_id(), InputError);
}

}  // namespace
}  // namespace megatrain
