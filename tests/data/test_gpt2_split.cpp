// The hand-written GPT-2 pre-tokenizer against PCRE2 running the same pattern: fixed pieces
// worked out by hand, every code point in a few contexts, and seeded fuzzing over letters,
// numbers, spaces and others from many scripts, contractions and invalid UTF-8.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "data/byte_unicode.h"
#include "data/gpt2_split.h"
#include "data/unicode_class.h"

namespace megatrain {
namespace {

using Pieces = std::vector<std::string_view>;

Pieces split(const Splitter& s, std::string_view text) {
  Pieces out;
  s.split_isolated(text, out);
  return out;
}

const Regex& pcre() {
  static const Regex regex(kGpt2Pattern, Regex::Syntax::kRegex, "test");
  return regex;
}

std::string utf8(char32_t cp) {
  std::string s;
  utf8_append(s, cp);
  return s;
}

TEST(Gpt2SplitTest, PiecesWorkedOutByHand) {
  const Gpt2Splitter g;
  EXPECT_EQ(split(g, "Hello world's  end!!\n\n  x"),
            (Pieces{"Hello", " world", "'s", " ", " end", "!!", "\n\n ", " x"}));
  EXPECT_EQ(split(g, "I'll 42x 'quote' \t\tz  "), (Pieces{"I", "'ll", " 42", "x", " '", "quote", "'", " \t", "\t", "z", "  "}));
  // U+3000 (ideographic space) is \s, U+00E9 a letter, U+0663 a number, U+0301 (a combining mark) an other.
  EXPECT_EQ(split(g, "caf\xC3\xA9\xE3\x80\x80\xD9\xA3 e\xCC\x81"),
            (Pieces{"caf\xC3\xA9", "\xE3\x80\x80", "\xD9\xA3", " e", "\xCC\x81"}));
  // Invalid bytes match nothing: they are gaps of their own, and end a whitespace run like the text's end.
  EXPECT_EQ(split(g, "ab\xFF\xFE" "cd  \xC3"), (Pieces{"ab", "\xFF\xFE", "cd", "  ", "\xC3"}));
  EXPECT_EQ(split(g, ""), Pieces{});
}

TEST(Gpt2SplitTest, CharacterClassesAreThoseOfPcre2) {
  EXPECT_EQ(char_class('a'), CharClass::kLetter);
  EXPECT_EQ(char_class('7'), CharClass::kNumber);
  EXPECT_EQ(char_class('\v'), CharClass::kSpace);
  EXPECT_EQ(char_class('_'), CharClass::kOther);
  EXPECT_EQ(char_class(0x4E2D), CharClass::kLetter);   // 中
  EXPECT_EQ(char_class(0x2167), CharClass::kNumber);   // Ⅷ (Nl)
  EXPECT_EQ(char_class(0x00B2), CharClass::kNumber);   // ² (No)
  EXPECT_EQ(char_class(0x2029), CharClass::kSpace);    // paragraph separator (Zp)
  EXPECT_EQ(char_class(0x1F600), CharClass::kOther);   // emoji
  EXPECT_EQ(char_class(0x180E), CharClass::kOther);    // not White_Space, though PCRE2's \s has it
  for (uint32_t b = 0; b < 128; ++b) EXPECT_EQ(kAsciiClass[b], char_class(b)) << "byte " << b;
}

// Every code point, alone and in runs with spaces, digits, letters and apostrophes around it.
TEST(Gpt2SplitTest, EveryCodePointSplitsAsPcre2Does) {
  const Gpt2Splitter g;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string c = utf8(cp);
    const std::string text = c + " " + c + c + "'s" + c + "  " + c + "1" + c + "\n";
    ASSERT_EQ(split(g, text), split(pcre(), text)) << "U+" << std::hex << static_cast<uint32_t>(cp);
  }
}

TEST(Gpt2SplitTest, FuzzedTextSplitsAsPcre2Does) {
  const std::vector<std::string> atoms = {
      "a", "Z", "q", "7", "0", " ", " ", "  ", "\t", "\n", "\r\n", "\v", "\f", "'", "'s", "'t", "'re", "'ve", "'m",
      "'ll", "'d", "'S", "'x", "!", ".", ",", "-", "_", "\"", "(", "\xC3\xA9", "\xD0\x96", "\xE4\xB8\xAD",
      "\xD9\xA3", "\xC2\xB2", "\xE2\x85\xA7", "\xC2\xA0", "\xE2\x80\x83", "\xE3\x80\x80", "\xE2\x80\xA8",
      "\xC2\x85", "\xE1\xA0\x8E", "\xE2\x80\x8B", "\xCC\x81", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
      "\xEF\xBF\xBF", "\xF3\xA0\x80\x81", "\xFF", "\x80", "\xC3", "\xE2\x82", "\xC0\xAF", "\xED\xA0\x80",
      "\xF4\x90\x80\x80", "\xF0\x9F\x98"};
  const Gpt2Splitter g;
  std::mt19937 rng(20261122);
  std::uniform_int_distribution<size_t> pick(0, atoms.size() - 1), length(0, 24);
  for (int iter = 0; iter < 200000; ++iter) {
    std::string text;
    for (size_t k = length(rng); k > 0; --k) text += atoms[pick(rng)];
    ASSERT_EQ(split(g, text), split(pcre(), text)) << "iteration " << iter;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text;
    for (size_t k = length(rng); k > 0; --k) text += static_cast<char>(byte(rng));
    ASSERT_EQ(split(g, text), split(pcre(), text)) << "random bytes, iteration " << iter;
  }
}

// [Note: White_Space] \s and \S of any pattern mean Unicode's White_Space, as in Hugging Face and
// tiktoken: U+180E (MONGOLIAN VOWEL SEPARATOR, "\xE1\xA0\x8E") is not a space, U+3000 is; escapes,
// \Q...\E and a ']' that opens a class keep their meaning.
TEST(Gpt2SplitTest, BackslashSIsUnicodeWhiteSpace) {
  const std::string mvs = "\xE1\xA0\x8E", ideographic = "\xE3\x80\x80";
  const std::string a = "a" + mvs, spaces = ideographic + " ", others = "," + mvs + "!";
  EXPECT_EQ(split(Regex(R"(\s+)", Regex::Syntax::kRegex, "t"), a + spaces + "b"), (Pieces{a, spaces, "b"}));
  EXPECT_EQ(split(Regex(R"(\S+)", Regex::Syntax::kRegex, "t"), a + " b"), (Pieces{a, " ", "b"}));
  EXPECT_EQ(split(Regex(R"([^\s\p{L}]+)", Regex::Syntax::kRegex, "t"), others + "\ta"), (Pieces{others, "\ta"}));
  EXPECT_EQ(split(Regex(R"(\Q\s\E|\\s|[]\s]+)", Regex::Syntax::kRegex, "t"), "x\\s]] " + mvs),
            (Pieces{"x", "\\s", "]] ", mvs}));
}

TEST(Gpt2SplitTest, MakeSplitterPicksTheMatcherOnlyForTheGpt2Pattern) {
  EXPECT_NE(dynamic_cast<const Gpt2Splitter*>(make_splitter(kGpt2Pattern, Regex::Syntax::kRegex, "t").get()),
            nullptr);
  EXPECT_NE(dynamic_cast<const Regex*>(make_splitter(kGpt2Pattern, Regex::Syntax::kLiteral, "t").get()), nullptr);
  EXPECT_NE(dynamic_cast<const Regex*>(make_splitter(R"(\p{N}+)", Regex::Syntax::kRegex, "t").get()), nullptr);
}

}  // namespace
}  // namespace megatrain
