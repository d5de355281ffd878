// A chat line to tokens and mask (rules in chat_document.h).
#include "data/chat_document.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

#include "data/byte_unicode.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

const char* json_kind(const nlohmann::ordered_json& v) {
  return v.is_null()      ? "null"
         : v.is_array()   ? "an array"
         : v.is_object()  ? "an object"
         : v.is_string()  ? "a string"
         : v.is_boolean() ? "a boolean"
                          : "a number";
}

nlohmann::ordered_json messages_of(const std::string& line) {
  nlohmann::ordered_json conv;
  try {
    conv = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    const size_t at = invalid_utf8_at(line);
    MT_DATA_CHECK(at == std::string::npos, "invalid UTF-8 at byte {} of the line", at + 1);
    throw DataError(fmt::format("invalid JSON ({})", e.what()));
  }
  MT_DATA_CHECK(conv.is_object(), "{} where a JSON object {{\"messages\": [...]}} was expected", json_kind(conv));
  const auto it = conv.find("messages");
  MT_DATA_CHECK(it != conv.end(),
                "the JSON object has no key \"messages\" (--format chat reads "
                "{{\"messages\": [{{\"role\": ..., \"content\": ...}}, ...]}})");
  MT_DATA_CHECK(it->is_array() && !it->empty(), "\"messages\" holds {}, not a non-empty array of messages",
                it->is_array() ? "an empty array" : json_kind(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& m = (*it)[i];
    MT_DATA_CHECK(m.is_object(), "messages[{}] is {}, not an object {{\"role\", \"content\"}}", i, json_kind(m));
    for (const char* key : {"role", "content"}) {
      const auto f = m.find(key);
      MT_DATA_CHECK(f != m.end(), "messages[{}] has no \"{}\"", i, key);
      MT_DATA_CHECK(f->is_string(), "messages[{}].{} is {}, not a string", i, key, json_kind(*f));
    }
  }
  return *it;
}

// R as the tokenizer reads it: each learned range and each stretch between them normalized on its
// own (NFC for Qwen's tokenizers), the ranges moved to match.
ChatRendering normalized(const ChatRendering& r, const Tokenizer& tok) {
  ChatRendering out;
  size_t at = 0;
  for (const auto& [begin, end] : r.learned) {
    out.text += tok.normalize(std::string_view(r.text).substr(at, begin - at));
    const size_t first = out.text.size();
    out.text += tok.normalize(std::string_view(r.text).substr(begin, end - begin));
    out.learned.emplace_back(first, out.text.size());
    at = end;
  }
  out.text += tok.normalize(std::string_view(r.text).substr(at));
  return out;
}

}  // namespace

void encode_chat_line(const std::string& line, const ChatTemplate& chat, const Tokenizer& tok,
                      std::vector<int32_t>& tokens, std::vector<uint8_t>& learned) {
  const ChatRendering r = normalized(chat.render_learned(messages_of(line)), tok);
  MT_DATA_CHECK(!r.learned.empty(), "the conversation has no assistant text to learn");
  const std::vector<int32_t> ids = tok.encode(r.text);
  const size_t first = tokens.size();
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  learned.resize(tokens.size(), 0);
  size_t begin = 0, range = 0;  // the bytes of token t start at `begin`; `range` the first range not behind it
  for (size_t t = 0; t < ids.size(); ++t) {
    const size_t end = begin + tok.decode(std::span(&ids[t], 1)).size();
    while (range < r.learned.size() && r.learned[range].second <= begin) ++range;
    if (range < r.learned.size() && r.learned[range].first < end) learned[first + t] = 1;
    begin = end;
  }
  MT_DATA_CHECK(begin == r.text.size(),
                "the tokenizer's tokens spell {} bytes of a {}-byte rendering, so the "
                "learned text cannot be placed on them; --format chat needs a tokenizer whose tokens spell the "
                "text exactly (no add_prefix_space, no lstrip/rstrip added tokens)",
                begin, r.text.size());
  tokens.push_back(tok.eod_id());
  learned.push_back(0);
}

}  // namespace megatrain
