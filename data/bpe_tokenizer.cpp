// Byte-level BPE from a Hugging Face tokenizer.json: parsing (nlohmann-json), added-token
// splitting (index by first byte), the pre-tokenizer pipeline and a bounded per-thread word cache;
// the regex splitter and the merge table live in bpe_regex.h and bpe_merges.h. Invariant: after
// load, every byte has a vocab id, every merge names vocab tokens, and every id in [0, vocab_size)
// decodes or is a hole.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <forward_list>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utf8proc.h>

#include "data/bpe_merges.h"
#include "data/gpt2_split.h"
#include "data/byte_unicode.h"
#include "data/unicode_class.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

using nlohmann::json;

const json kNull;                                  // what an absent field reads as

[[noreturn]] void bad(const std::string& path, std::string_view field, std::string_view what) {
  throw DataError(fmt::format("tokenizer file '{}': {} {}", path, field, what));
}

// One pre-tokenization step: optionally prepend a space, then optionally split by a regex.
struct PreStep {
  std::shared_ptr<const Splitter> split;  // null: the piece stays whole
  bool add_prefix_space = false;       // ByteLevel: prepend ' ' unless the piece starts with one
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool lstrip = false, rstrip = false;  // absorb whitespace on that side into the token
};

// Added-token indices by first byte, longest first, so the first prefix match is the longest.
struct TokenIndex {
  std::array<std::vector<int>, 256> by_byte;
  std::string first_bytes;  // the distinct first bytes of the tokens
  bool empty() const { return first_bytes.empty(); }
  // The first position >= pos where a token may start, or s.size().
  size_t next_start(std::string_view s, size_t pos) const {
    if (first_bytes.size() == 1) {  // the common case (one special token, or all start with '<')
      const void* at = std::memchr(s.data() + pos, first_bytes[0], s.size() - pos);
      return at != nullptr ? static_cast<size_t>(static_cast<const char*>(at) - s.data()) : s.size();
    }
    while (pos < s.size() && by_byte[static_cast<unsigned char>(s[pos])].empty()) ++pos;
    return pos;
  }
};

struct Segment {
  std::string_view text;
  int32_t id = -1;  // >= 0: an added token
};

// Length of the white-space character at s[i] / ending at s[end], or 0. lstrip and rstrip take
// Unicode's White_Space, as HF does ([Note: White_Space]).
size_t space_at(std::string_view s, size_t i) {
  size_t len = 0;
  return class_at(s, i, len) == CharClass::kSpace ? len : 0;
}
size_t space_before(std::string_view s, size_t end) {
  size_t i = end;
  const auto continuation = [&](size_t k) {
    return (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80;
  };
  while (i > 0 && end - i < 4 && (i == end || continuation(i))) --i;
  const size_t len = i < end ? space_at(s, i) : 0;
  return i + len == end ? len : 0;
}

bool get_bool(const json& obj, const char* key, bool fallback, const std::string& path,
              const std::string& field) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_boolean()) bad(path, field + "." + key, "must be true or false");
  return obj[key].get<bool>();
}

std::string get_string(const json& obj, const char* key, const std::string& path,
                       const std::string& field) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_string())
    bad(path, field + "." + key, "is missing or not a string; see the tokenizer.json format");
  return obj[key].get<std::string>();
}

int32_t get_id(const json& v, const std::string& path, const std::string& field) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (int64_t{1} << 31))
    bad(path, field, "must be an integer id in [0, 2^31)");
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

struct BpeTokenizer::Impl {
  std::string path;
  std::unordered_map<std::string, int32_t> vocab;  // byte-level spelling -> id
  MergeTable merges;
  std::array<int32_t, 256> byte_ids{};
  std::vector<std::string> id_bytes;  // what each id decodes to; empty: no token has that id
  std::vector<AddedToken> added;
  TokenIndex raw_index, normalized_index;  // added tokens with normalized = false / true
  std::vector<PreStep> steps;
  bool ignore_merges = false;
  bool nfc = false;  // normalizer: NFC
  uint64_t serial = WordCache::new_owner();  // names this tokenizer's entries in the WordCaches

  void split_added(std::vector<Segment>& segments, const TokenIndex& index) const;
  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;
  void encode_word(std::string_view word, WordCache& cache, std::vector<int32_t>& ids) const;
  void parse_pre_tokenizer(const json& p, const std::string& field, bool& saw_byte_level);
  std::string where(const std::string& field) const {
    return fmt::format("tokenizer file '{}': {}", path, field);
  }
};

// Splits every plain segment at the leftmost-longest matches of `index`.
void BpeTokenizer::Impl::split_added(std::vector<Segment>& segments,
                                     const TokenIndex& index) const {
  if (index.empty()) return;
  std::vector<Segment> out;
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(seg);
      continue;
    }
    const std::string_view s = seg.text;
    size_t last = 0;
    for (size_t pos = index.next_start(s, 0); pos < s.size(); pos = index.next_start(s, pos)) {
      int found = -1;
      for (int t : index.by_byte[static_cast<unsigned char>(s[pos])]) {
        if (s.substr(pos).starts_with(added[t].content)) {
          found = t;
          break;
        }
      }
      if (found < 0) {
        ++pos;
        continue;
      }
      const AddedToken& tok = added[found];
      size_t begin = pos, end = pos + tok.content.size();
      for (size_t k = 0; tok.lstrip && (k = space_before(s, begin)) > 0 && begin - k >= last;)
        begin -= k;
      for (size_t k = 0; tok.rstrip && end < s.size() && (k = space_at(s, end)) > 0;) end += k;
      if (begin > last) out.push_back({s.substr(last, begin - last)});
      out.push_back({s.substr(begin, end - begin), tok.id});
      last = pos = end;
    }
    if (last < s.size()) out.push_back({s.substr(last)});
  }
  segments = std::move(out);
}

void BpeTokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<std::string_view> pieces{text}, next;
  std::forward_list<std::string> prefixed;  // pieces with a space prepended (add_prefix_space)
  for (const PreStep& step : steps) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (step.add_prefix_space && piece.front() != ' ')
        piece = prefixed.emplace_front(1, ' ').append(piece);
      if (step.split) {
        step.split->split_isolated(piece, next);
      } else {
        next.push_back(piece);
      }
    }
    std::swap(pieces, next);
  }
  WordCache& cache = WordCache::of(serial);
  for (std::string_view piece : pieces) encode_word(piece, cache, ids);
}

void BpeTokenizer::Impl::encode_word(std::string_view word, WordCache& cache,
                                     std::vector<int32_t>& ids) const {
  if (cache.find(word, ids)) return;
  const size_t first = ids.size();
  auto whole = ignore_merges ? vocab.find(byte_level_encode(word)) : vocab.end();
  if (whole != vocab.end()) {  // HF's ignore_merges: a word that is a vocab token stays whole
    ids.push_back(whole->second);
  } else {
    thread_local std::vector<int32_t> symbols;
    symbols.resize(word.size());
    for (size_t i = 0; i < word.size(); ++i)
      symbols[i] = byte_ids[static_cast<unsigned char>(word[i])];
    merges.apply(symbols, ids);
  }
  cache.insert(word, std::span(ids).subspan(first));
}

void BpeTokenizer::Impl::parse_pre_tokenizer(const json& p, const std::string& field,
                                             bool& saw_byte_level) {
  const std::string type = get_string(p, "type", path, field);
  if (saw_byte_level)
    bad(path, field, "comes after the ByteLevel pre-tokenizer; ByteLevel must be the last step");
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
      bad(path, field + ".pretokenizers", "must be a list of pre-tokenizers");
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i)
      parse_pre_tokenizer(p["pretokenizers"][i], fmt::format("{}.pretokenizers[{}]", field, i),
                          saw_byte_level);
  } else if (type == "ByteLevel") {
    PreStep step;
    step.add_prefix_space = get_bool(p, "add_prefix_space", true, path, field);
    if (get_bool(p, "use_regex", true, path, field))
      step.split = make_splitter(kGpt2Pattern, Regex::Syntax::kRegex, where(field));
    steps.push_back(std::move(step));
    saw_byte_level = true;
  } else if (type == "Split") {
    const json& pattern = p.contains("pattern") ? p["pattern"] : kNull;
    const bool literal = pattern.is_object() && pattern.contains("String");
    if (!literal && !(pattern.is_object() && pattern.contains("Regex")))
      bad(path, field + ".pattern", "must be {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    const std::string text =
        get_string(pattern, literal ? "String" : "Regex", path, field + ".pattern");
    const std::string behavior = get_string(p, "behavior", path, field);
    if (behavior != "Isolated")
      bad(path, field + ".behavior",
          fmt::format("is \"{}\"; only \"Isolated\" is supported (it keeps every byte)", behavior));
    if (get_bool(p, "invert", false, path, field))
      bad(path, field + ".invert", "is true; only invert = false is supported");
    steps.push_back(
        {make_splitter(text, literal ? Regex::Syntax::kLiteral : Regex::Syntax::kRegex,
                       where(field + ".pattern")),
         false});
  } else if (type == "Digits") {
    const bool each = get_bool(p, "individual_digits", false, path, field);
    steps.push_back({make_splitter(each ? R"(\p{N})" : R"(\p{N}+)", Regex::Syntax::kRegex, where(field)),
                     false});
  } else {
    bad(path, field + ".type",
        fmt::format("is \"{}\"; supported pre-tokenizers are ByteLevel, Split (Isolated), "
                    "Digits and a Sequence of these ending in ByteLevel",
                    type));
  }
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.path = path;
  std::ifstream file(path, std::ios::binary);
  MT_DATA_CHECK(file.good(),
                 "tokenizer file '{}' cannot be opened ({}); give the path of a "
                 "Hugging Face tokenizer.json, or \"bytes\"",
                 path, std::strerror(errno));
  json j;
  try {
    j = json::parse(file);
  } catch (const json::exception& e) {
    bad(path, "is not valid JSON:", fmt::format("{}; re-save it with tokenizers", e.what()));
  }
  if (!j.is_object()) bad(path, "top level", "must be a JSON object with a \"model\" field");
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& n = j["normalizer"];
    const json* step = &n;
    if (n.is_object() && n.value("type", "") == "Sequence" && n.contains("normalizers") &&
        n["normalizers"].is_array() && n["normalizers"].size() == 1)
      step = &n["normalizers"][0];
    if (!step->is_object() || step->value("type", "") != "NFC")
      bad(path, "normalizer",
          fmt::format("is {}; the only normalizer supported is NFC (alone or as a Sequence's only step); "
                      "remove it if the model was trained without one",
                      n.dump().substr(0, 120)));
    m.nfc = true;
  }
  const json& model = j.contains("model") ? j["model"] : kNull;
  if (get_string(model, "type", path, "model") != "BPE")
    bad(path, "model.type",
        fmt::format("is \"{}\"; only \"BPE\" (byte-level) is supported",
                    model["type"].get<std::string>()));
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "" && model[key] != 0)
      bad(path, fmt::format("model.{}", key),
          "is set; byte-level BPE inference uses none: null it");
  m.ignore_merges = get_bool(model, "ignore_merges", false, path, "model");

  // Vocabulary, then added tokens (which may repeat or extend it).
  if (!model.contains("vocab") || !model["vocab"].is_object())
    bad(path, "model.vocab", "must be an object mapping each token to its id");
  int64_t size = 0;
  for (const auto& [token, value] : model["vocab"].items()) {
    const int32_t id = get_id(value, path, fmt::format("model.vocab[\"{}\"]", token));
    m.vocab.emplace(token, id);
    size = std::max<int64_t>(size, int64_t{id} + 1);
  }
  const json& added = j.contains("added_tokens") ? j["added_tokens"] : kNull;
  if (!added.is_array() && !added.is_null()) bad(path, "added_tokens", "must be a list");
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string field = fmt::format("added_tokens[{}]", i);
    AddedToken tok;
    tok.content = get_string(added[i], "content", path, field);
    if (tok.content.empty()) bad(path, field + ".content", "is empty; remove the entry");
    tok.id = get_id(added[i].contains("id") ? added[i]["id"] : kNull, path, field + ".id");
    tok.lstrip = get_bool(added[i], "lstrip", false, path, field);
    tok.rstrip = get_bool(added[i], "rstrip", false, path, field);
    if (get_bool(added[i], "single_word", false, path, field))
      bad(path, field + ".single_word", "is true; single_word added tokens are not supported");
    const bool special = get_bool(added[i], "special", false, path, field);
    const bool normalized = get_bool(added[i], "normalized", !special, path, field);
    m.added.push_back(std::move(tok));
    TokenIndex& index = normalized ? m.normalized_index : m.raw_index;
    const auto first = static_cast<unsigned char>(m.added.back().content[0]);
    auto& list = index.by_byte[first];
    if (list.empty()) index.first_bytes += static_cast<char>(first);
    list.push_back(static_cast<int>(i));
    std::stable_sort(list.begin(), list.end(), [&](int x, int y) {
      return m.added[x].content.size() > m.added[y].content.size();
    });
    size = std::max<int64_t>(size, int64_t{m.added.back().id} + 1);
  }
  m.id_bytes.assign(size, {});
  for (const auto& [token, id] : m.vocab) {
    if (!m.id_bytes[id].empty()) bad(path, "model.vocab", fmt::format("gives id {} twice", id));
    m.id_bytes[id] = byte_level_decode(token).value_or(token);  // HF decodes odd tokens as-is
  }
  for (const AddedToken& tok : m.added) m.id_bytes[tok.id] = tok.content;
  for (int b = 0; b < 256; ++b) {
    auto it = m.vocab.find(byte_symbol(static_cast<unsigned char>(b)));
    if (it == m.vocab.end())
      bad(path, "model.vocab",
          fmt::format("has no token for byte 0x{:02X} (\"{}\"); a byte-level "
                      "BPE vocab holds all 256 byte symbols",
                      b, byte_symbol(static_cast<unsigned char>(b))));
    m.byte_ids[b] = it->second;
  }

  // Merges, "a b" or ["a", "b"]; the rank is the position in the list.
  if (!model.contains("merges") || !model["merges"].is_array())
    bad(path, "model.merges", "must be a list of merges, \"a b\" or [\"a\", \"b\"]");
  const json& merges = model["merges"];
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& e = merges[rank];
    const std::string field = fmt::format("model.merges[{}]", rank);
    std::string left, right;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        bad(path, field, fmt::format("is \"{}\"; a merge is two tokens separated by one space", s));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      bad(path, field, "must be \"a b\" or [\"a\", \"b\"]");
    }
    for (const std::string& name : {left, right, left + right}) {
      if (!m.vocab.contains(name))
        bad(path, field,
            fmt::format("names token \"{}\", which is not in model.vocab; the merges "
                        "and vocab come from different tokenizers",
                        name));
    }
    m.merges.add(m.vocab.at(left), m.vocab.at(right), static_cast<int32_t>(rank),
                 m.vocab.at(left + right));
  }

  if (!j.contains("pre_tokenizer") || !j["pre_tokenizer"].is_object())
    bad(path, "pre_tokenizer", "is missing; byte-level BPE needs a ByteLevel pre-tokenizer");
  bool saw_byte_level = false;
  m.parse_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer", saw_byte_level);
  if (!saw_byte_level)
    bad(path, "pre_tokenizer", "has no ByteLevel step; only byte-level BPE is supported");
  return BpeTokenizer(std::move(impl));
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

std::string BpeTokenizer::normalize(std::string_view text) const {
  if (!impl_->nfc) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    std::free(out);
    const size_t at = invalid_utf8_at(text);
    throw DataError(fmt::format("tokenizer file '{}': normalizer NFC: the text is not valid UTF-8 ({}{}); "
                                "Hugging Face tokenizers read only valid UTF-8",
                                impl_->path, utf8proc_errmsg(n),
                                at == std::string_view::npos ? "" : fmt::format(" at byte {}", at + 1)));
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<Segment> segments{{text}};
  impl_->split_added(segments, impl_->raw_index);
  std::forward_list<std::string> normalized;  // the NFC text the segments below point into
  if (impl_->nfc)
    for (Segment& seg : segments)
      if (seg.id < 0) seg.text = normalized.emplace_front(normalize(seg.text));
  impl_->split_added(segments, impl_->normalized_index);
  std::vector<int32_t> ids;
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else if (!seg.text.empty()) {
      impl_->encode_text(seg.text, ids);
    }
  }
  return ids;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) {
    MT_DATA_CHECK(id >= 0 && id < vocab_size() && !impl_->id_bytes[id].empty(),
                   "token id {} is not in tokenizer '{}' (vocab_size {}); the ids come from a "
                   "different tokenizer",
                   id, impl_->path, vocab_size());
    text += impl_->id_bytes[id];
  }
  return text;
}

int BpeTokenizer::vocab_size() const { return static_cast<int>(impl_->id_bytes.size()); }

int32_t BpeTokenizer::eod_id() const {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (auto id = token_id(name)) return *id;
  bad(impl_->path, "added_tokens",
      "hold no end-of-document token (<|endoftext|>, "
      "<|end_of_text|> or </s>, also looked up in model.vocab); add one");
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& tok : impl_->added)
    if (tok.content == token) return tok.id;
  if (auto it = impl_->vocab.find(std::string(token)); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

}  // namespace megatrain
