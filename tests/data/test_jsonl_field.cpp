// JsonlField: the simdjson fast path and the nlohmann-json slow path agree with nlohmann-json on
// what a JSONL line holds at the key, on accepted and refused lines alike.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/jsonl_field.h"

namespace megatrain {
namespace {

struct Result {
  bool ok;
  std::string value;  // the text, or the error
};

Result extract(const std::string& key, std::string line) {
  JsonlField field(key, "check --json-key");
  std::string text, error;
  const bool ok = field.extract(line, text, error);
  return {ok, ok ? text : error};
}

TEST(JsonlFieldTest, ReadsTheStringAtTheKey) {
  EXPECT_EQ(extract("text", R"({"id": 7, "text": "a\nb \u00e9 \ud83d\ude00", "meta": {"text": 1}})").value,
            "a\nb \xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(extract("body", R"({"text": "no", "body": ""})").value, "");
  EXPECT_TRUE(extract("body", R"({"text": "no", "body": ""})").ok);
  EXPECT_EQ(extract("text", "  {\"text\": \"crlf\"}\r").value, "crlf");
}

TEST(JsonlFieldTest, TheLastOfARepeatedKeyCountsAsInNlohmannJson) {
  const std::string line = R"({"text": "first", "text": "second"})";
  EXPECT_EQ(extract("text", line).value, "second");
  EXPECT_EQ(nlohmann::json::parse(line)["text"], "second");
}

TEST(JsonlFieldTest, LinesSimdjsonRefusesButNlohmannReadsAreRead) {
  // An integer beyond 64 bits and nesting deeper than simdjson's default limit of 1024.
  EXPECT_EQ(extract("text", R"({"n": 123456789012345678901234567890, "text": "big"})").value, "big");
  const std::string deep = std::string(2000, '[') + std::string(2000, ']');
  EXPECT_EQ(extract("text", "{\"d\": " + deep + ", \"text\": \"deep\"}").value, "deep");
}

TEST(JsonlFieldTest, ErrorsNameWhatIsWrong) {
  struct Case {
    std::string line, error;
  };
  const std::vector<Case> cases = {
      {R"({"text": "unterminated})", "invalid JSON (["},
      {R"({"text": "x"} trailing)", "invalid JSON (["},
      {R"({"text": "x",})", "invalid JSON (["},
      {R"(["text"])", "a JSON array where a JSON object was expected"},
      {R"("text")", "a JSON string where a JSON object was expected"},
      {R"(12)", "a JSON number where a JSON object was expected"},
      {R"({"body": "x", "meta": {"text": "nested"}})", "the JSON object has no key \"text\" (check --json-key)"},
      {R"({"text": 5})", "key \"text\" holds a JSON number, not a string"},
      {R"({"text": 2.5})", "key \"text\" holds a JSON number, not a string"},
      {R"({"text": null})", "key \"text\" holds a JSON null, not a string"},
      {R"({"text": true})", "key \"text\" holds a JSON boolean, not a string"},
      {R"({"text": ["a"]})", "key \"text\" holds a JSON array, not a string"},
      {R"({"text": {"a": "b"}})", "key \"text\" holds a JSON object, not a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    const Result r = extract("text", c.line);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.value.substr(0, c.error.size()), c.error);
  }
}

TEST(JsonlFieldTest, OneFieldReadsManyLinesOfChangingLength) {
  JsonlField field("text", "check --json-key");
  std::string text, error;
  for (int n : {300, 3, 5000, 0, 70}) {
    std::string line = nlohmann::json{{"text", std::string(n, 'x')}}.dump();
    ASSERT_TRUE(field.extract(line, text, error)) << error;
    EXPECT_EQ(text, std::string(n, 'x'));
  }
}

}  // namespace
}  // namespace megatrain
