// JSONL value extraction (rules in jsonl_field.h): simdjson first, nlohmann-json when simdjson
// refuses the line.
#include "data/jsonl_field.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <simdjson.h>
#include <utility>

namespace megatrain {
namespace {

const char* type_name(simdjson::dom::element_type type) {  // nlohmann-json's names
  using T = simdjson::dom::element_type;
  switch (type) {
    case T::ARRAY: return "array";
    case T::OBJECT: return "object";
    case T::STRING: return "string";
    case T::BOOL: return "boolean";
    case T::NULL_VALUE: return "null";
    case T::INT64:
    case T::UINT64:
    case T::DOUBLE: return "number";
  }
  return "value";
}

std::string not_an_object(const char* type) {
  return fmt::format("a JSON {} where a JSON object was expected", type);
}
std::string no_key(const std::string& key, const std::string& hint) {
  return fmt::format("the JSON object has no key \"{}\" ({})", key, hint);
}
std::string not_a_string(const std::string& key, const char* type) {
  return fmt::format("key \"{}\" holds a JSON {}, not a string", key, type);
}

// The slow path: nlohmann-json decides, and names the error.
bool extract_slow(const std::string& line, const std::string& key, const std::string& hint, std::string& text,
                  std::string& error) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    error = fmt::format("invalid JSON ({})", e.what());
    return false;
  }
  if (!j.is_object()) {
    error = not_an_object(j.type_name());
    return false;
  }
  auto it = j.find(key);
  if (it == j.end()) {
    error = no_key(key, hint);
    return false;
  }
  if (!it->is_string()) {
    error = not_a_string(key, it->type_name());
    return false;
  }
  text = std::move(it->get_ref<std::string&>());
  return true;
}

}  // namespace

struct JsonlField::Parser {
  simdjson::dom::parser dom;
};

JsonlField::JsonlField(std::string key, std::string missing_hint)
    : key_(std::move(key)), missing_hint_(std::move(missing_hint)), parser_(std::make_unique<Parser>()) {}
JsonlField::~JsonlField() = default;

bool JsonlField::extract(std::string& line, std::string& text, std::string& error) {
  line.reserve(line.size() + simdjson::SIMDJSON_PADDING);
  simdjson::dom::element root;
  if (parser_->dom.parse(simdjson::padded_string_view(line.data(), line.size(), line.capacity())).get(root) !=
      simdjson::SUCCESS)
    return extract_slow(line, key_, missing_hint_, text, error);
  simdjson::dom::object object;
  if (root.get(object) != simdjson::SUCCESS) {
    error = not_an_object(type_name(root.type()));
    return false;
  }
  bool found = false;
  simdjson::dom::element value;
  for (auto field : object) {  // every field: the last one of that key counts
    if (field.key == key_) {
      value = field.value;
      found = true;
    }
  }
  if (!found) {
    error = no_key(key_, missing_hint_);
    return false;
  }
  std::string_view s;
  if (value.get(s) != simdjson::SUCCESS) {
    error = not_a_string(key_, type_name(value.type()));
    return false;
  }
  text.assign(s);
  return true;
}

}  // namespace megatrain
