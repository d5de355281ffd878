// The document text of one JSONL line: the string value at a key of the line's JSON object.
//
// Fast path: simdjson's DOM parser, which validates the whole line (structure and UTF-8) before
// the key is looked up. When simdjson refuses a line, nlohmann-json parses it again and decides:
// so a line simdjson cannot represent (an integer beyond 64 bits, nesting deeper than its limit)
// is still read, and every error message comes from one parser. A key given twice: the last one
// counts (as in nlohmann-json and Python's json module).
//
// Invariant: extract accepts exactly the lines nlohmann-json parses into an object whose value at
// the key is a string, and yields that string.
#pragma once
#include <memory>
#include <string>

namespace megatrain {

class JsonlField {
 public:
  // MISSING_HINT: the fix a line without the key is told, in parentheses ("check --json-key").
  JsonlField(std::string key, std::string missing_hint);
  ~JsonlField();
  JsonlField(const JsonlField&) = delete;
  JsonlField& operator=(const JsonlField&) = delete;

  // True: `text` holds the value. False: `error` says what is wrong with the line ("invalid JSON
  // (...)", "a JSON array where a JSON object was expected", "the JSON object has no key ...",
  // "key ... holds a JSON number, not a string"), without file or line. The capacity of `line`
  // may grow (simdjson reads a few bytes past the end); its content does not change.
  bool extract(std::string& line, std::string& text, std::string& error);

 private:
  struct Parser;
  std::string key_, missing_hint_;
  std::unique_ptr<Parser> parser_;
};

}  // namespace megatrain
