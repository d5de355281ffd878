// `megatrain preprocess --format chat` (data/preprocess.h, data/chat_document.h): with the bytes
// tokenizer, whose tokens are the UTF-8 bytes themselves, each conversation's document is checked
// byte for byte — the rendering, EOD — and its mask learns exactly the assistant text the template
// marks ({% generation %} tags) or the prefix rule finds; every bad line is named by FILE:LINE and
// its field, leaves nothing behind, or is counted under --skip-bad-lines, also when a worker finds
// it; --max-tokens refuses or cuts a long conversation. Token ids and masks against transformers
// with real tokenizers: tests/reference/chat_preprocess_reference.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
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
// "<role>content|" per message; the assistant's content and "|" inside generation tags.
const char* kTagged =
    "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}|"
    "{% endgeneration %}{% else %}{{ m.content }}|{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";
// The same text without tags: the prefix rule learns the same bytes.
const char* kPlain =
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}|{% endfor %}{% if add_generation_prompt %}<assistant>{% "
    "endif %}";

class ChatPreprocess : public ::testing::Test {
 public:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  PreprocessOptions options(const std::string& jsonl, const std::string& out, const std::string& tmpl = kTagged) const {
    std::ofstream(path(out + ".jsonl"), std::ios::binary) << jsonl;
    std::ofstream(path(out + "-config.json")) << nlohmann::json{{"chat_template", tmpl}}.dump();
    PreprocessOptions o;
    o.inputs = {path(out + ".jsonl")};
    o.output_prefix = path(out);
    o.format = PreprocessFormat::chat;
    o.chat_config = path(out + "-config.json");
    return o;
  }
  // Document D of PREFIX: its bytes as text (EOD as "$") and its mask as '1'/'0' per token.
  std::pair<std::string, std::string> document(const std::string& prefix, int64_t d) const {
    const IndexedDataset ds = IndexedDataset::open(path(prefix));
    EXPECT_TRUE(ds.has_loss_mask());
    const int64_t n = ds.sequence_length(d), first = ds.sequence_start(d);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::vector<uint8_t> learned(static_cast<size_t>(n));
    ds.read_tokens(first, n, tokens.data());
    ds.read_loss_mask(first, n, learned.data());
    std::string text, mask;
    for (size_t t = 0; t < tokens.size(); ++t) {
      text += tokens[t] == kBytesEod ? '$' : static_cast<char>(tokens[t]);
      mask += learned[t] != 0 ? '1' : '0';
    }
    return {text, mask};
  }
  test::TempDir dir_{"chat_preprocess"};
};

// MASK as '1' under each byte of TEXT that lies inside [ and ], the brackets removed.
std::pair<std::string, std::string> marked(const std::string& text) {
  std::string plain, mask;
  bool in = false;
  for (char c : text) {
    if (c == '[' || c == ']') {
      in = c == '[';
      continue;
    }
    plain += c;
    mask += in ? '1' : '0';
  }
  return {plain, mask};
}

const std::string kTwoTurns =
    R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},)"
    R"( {"role": "assistant", "content": "yo"}, {"role": "user", "content": "2+2?"},)"
    R"( {"role": "assistant", "content": "4 ✓"}]})"
    "\n";
const std::string kWant = "<system>be brief|<user>hi|<assistant>[yo|]<user>2+2?|<assistant>[4 ✓|]$";

TEST_F(ChatPreprocess, TheAssistantTextIsLearnedByTagsAndByPrefixes) {
  for (const char* tmpl : {kTagged, kPlain}) {
    const PreprocessStats stats = preprocess(options(kTwoTurns + "\n" + kTwoTurns, "two", tmpl));
    EXPECT_EQ(stats.documents, 2);
    EXPECT_EQ(document("two", 0), marked(kWant)) << tmpl;
    EXPECT_EQ(document("two", 1), marked(kWant)) << tmpl;
  }
}

TEST_F(ChatPreprocess, TagsWinOverPrefixesAndNeedNotCoverATurn) {
  // The "|" after the answer is outside the tags: the prefix rule would learn "yo|".
  const char* tmpl =
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
      "{% endgeneration %}|{% else %}{{ m.content }}{% endif %}{% endfor %}";
  preprocess(options(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})",
                     "first", tmpl));
  EXPECT_EQ(document("first", 0), marked("<user>hi<assistant>[yo]|$"));
}

TEST_F(ChatPreprocess, BadLinesNameFileLineAndFieldOrAreCounted) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"not json", "invalid JSON"},
      {"[1, 2]", "an array where a JSON object"},
      {R"({"conversation": []})", "no key \"messages\""},
      {R"({"messages": []})", "an empty array"},
      {R"({"messages": ["hi"]})", "messages[0] is a string"},
      {R"({"messages": [{"role": "user"}]})", "messages[0] has no \"content\""},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": 4}]})",
       "messages[1].content is a number"},
      {R"({"messages": [{"role": "user", "content": "no answer"}]})", "no assistant text to learn"},
      {R"({"messages": [{"role": "assistant", "content": "\ufdd0"}]})", "U+FDD0"},
      {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"\xff\"}]}", "invalid UTF-8 at byte 49"},
  };
  for (const auto& [line, what] : bad) {
    const PreprocessOptions o = options(kTwoTurns + line + "\n" + kTwoTurns, "bad");
    const std::string msg = test::input_error_of([&] { preprocess(o); });
    EXPECT_CONTAINS(msg, o.inputs[0] + ":2: ");
    EXPECT_CONTAINS(msg, what);
    EXPECT_CONTAINS(msg, "--skip-bad-lines");
    for (const char* ext : {".bin", ".idx", ".lossmask", ".bin.tmp", ".idx.tmp", ".lossmask.tmp"})
      EXPECT_FALSE(fs::exists(path("bad") + ext)) << line << ext;
  }
  std::string jsonl;
  for (int i = 0; i < 40; ++i) jsonl += i % 4 == 1 ? bad[static_cast<size_t>(i) % bad.size()].first + "\n" : kTwoTurns;
  for (int workers : {1, 3}) {
    PreprocessOptions o = options(jsonl, "skip" + std::to_string(workers));
    o.skip_bad_lines = true;
    o.workers = workers;
    o.batch_bytes = 300;  // several batches, so workers drop lines in batches of their own
    const PreprocessStats stats = preprocess(o);
    EXPECT_EQ(stats.documents, 30);
    EXPECT_EQ(stats.skipped_lines, 10);
    EXPECT_CONTAINS(preprocess_summary(stats), "10 bad lines skipped (" + o.inputs[0] + ":2, ");
    EXPECT_EQ(document("skip" + std::to_string(workers), 29), marked(kWant));
  }
}

TEST_F(ChatPreprocess, TheTemplateIsNamedWhenItFails) {
  const auto error = [&](const std::string& tmpl) {
    return test::input_error_of([&] { preprocess(options(kTwoTurns, "tmpl", tmpl)); });
  };
  const std::string raising = error("{{ raise_exception('roles must alternate') }}");
  EXPECT_CONTAINS(raising, ":1: ");
  EXPECT_CONTAINS(raising, "tmpl-config.json: chat_template: rendering failed");
  EXPECT_CONTAINS(raising, "roles must alternate");
  EXPECT_CONTAINS(error("{% generation %}{% generation %}x{% endgeneration %}{% endgeneration %}"), "do not nest");
  // The answer's text depends on what follows it: the prefix rule cannot find it, and says so.
  const std::string unstable = error("{% for m in messages %}{{ m.content if loop.last else m.role }}{% endfor %}");
  EXPECT_CONTAINS(unstable, "messages[2] (an assistant turn) is rendered differently");
  EXPECT_CONTAINS(unstable, "{% generation %}");
  PreprocessOptions o = options(kTwoTurns, "missing");
  o.chat_config = path("nowhere.json");
  EXPECT_CONTAINS(test::input_error_of([&] { preprocess(o); }), "nowhere.json: cannot open");
}

TEST_F(ChatPreprocess, LongConversationsAreRefusedOrCut) {
  const std::string doc = marked(kWant).first;
  const auto n = static_cast<int64_t>(doc.size());  // its EOD included
  PreprocessOptions o = options(kTwoTurns, "long");
  o.max_tokens = n;
  EXPECT_EQ(preprocess(o).documents, 1);  // exactly at the limit: kept whole
  o.max_tokens = n - 1;
  const std::string msg = test::input_error_of([&] { preprocess(o); });
  EXPECT_CONTAINS(msg, ":1: the document is " + std::to_string(n) +
                           " tokens (its EOD included), more than "
                           "--max-tokens " +
                           std::to_string(n - 1));
  EXPECT_CONTAINS(msg, "--truncate");
  o.max_tokens = 39;  // cut inside the first answer
  o.truncate = true;
  const PreprocessStats stats = preprocess(o);
  EXPECT_EQ(stats.truncated, 1);
  EXPECT_CONTAINS(preprocess_summary(stats), "1 cut to --max-tokens");
  // The first 38 bytes, then the EOD, not learned although the byte it replaces was.
  EXPECT_EQ(document("long", 0), marked("<system>be brief|<user>hi|<assistant>[y]$"));
  o.truncate = false;
  o.skip_bad_lines = true;
  const std::string two = kTwoTurns + R"({"messages": [{"role": "assistant", "content": "ok"}]})" + "\n";
  o = options(two, "long2"), o.max_tokens = 20, o.skip_bad_lines = true;
  const PreprocessStats skipped = preprocess(o);
  EXPECT_EQ(skipped.documents, 1);
  EXPECT_EQ(skipped.skipped_lines, 1);
  EXPECT_EQ(document("long2", 0), marked("<assistant>[ok|]$"));
}

TEST_F(ChatPreprocess, ConflictingOptionsAreRefused) {
  const auto error = [&](auto change) {
    PreprocessOptions o = options(kTwoTurns, "opts");
    change(o);
    return test::input_error_of([&] { preprocess(o); });
  };
  EXPECT_CONTAINS(error([](PreprocessOptions& o) { o.chat_config.clear(); }), "--format chat needs --tokenizer-config");
  EXPECT_CONTAINS(error([](PreprocessOptions& o) { o.format = PreprocessFormat::prompt_completion; }),
                  "--tokenizer-config is read by --format chat only");
  EXPECT_CONTAINS(error([](PreprocessOptions& o) { o.truncate = true; }), "give --max-tokens too");
  EXPECT_CONTAINS(error([](PreprocessOptions& o) { o.max_tokens = 1; }), "room for the EOD only");
  EXPECT_CONTAINS(error([](PreprocessOptions& o) { o.json_key = "text"; }), "--format chat reads JSONL lines");
  EXPECT_CONTAINS(error([](PreprocessOptions& o) {
                    o.format = PreprocessFormat::documents;
                    o.chat_config.clear();
                    o.max_tokens = 5;
                  }),
                  "text documents are not cut");
}

}  // namespace
}  // namespace megatrain
