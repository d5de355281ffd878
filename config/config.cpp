// Reading Config. One table of fields (config/config_fields.h) drives the TOML → struct
// conversion, the unknown-key check and config_to_toml (config/config_toml.cpp), so a key added
// there is known everywhere.
// Invariant: every key a file or --set names is either a field of that table or an InputError.
#include "config/config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <span>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "config/config_fields.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

using config_fields::float_text;
using config_fields::for_each_field;
using config_fields::quote;
using config_fields::spellings;

constexpr std::string_view kReference = "(see README, \"Config reference\")";
constexpr std::array<std::string_view, 10> kSections = {"model", "moe",        "parallel", "train",      "optimizer",
                                                        "data",  "checkpoint", "log",      "loss_scale", "health"};

struct Key {
  std::string_view section, name;
};
const std::vector<Key>& known_keys() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> out;
    Config c;
    for_each_field(c, [&](std::string_view s, std::string_view k, auto&) { out.push_back({s, k}); });
    return out;
  }();
  return keys;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// " — did you mean 'S.K'?" for the closest key of SECTION (edit distance ≤ 2), else for the same
// key in another section; "" when nothing is close. SECTION "" = the key was given at top level.
std::string suggest_key(std::string_view section, std::string_view key) {
  const Key* best = nullptr;
  size_t best_d = 3;
  for (const Key& k : known_keys()) {
    if (k.section != section) continue;
    size_t d = edit_distance(key, k.name);
    if (d < best_d) best = &k, best_d = d;
  }
  if (!best)
    for (const Key& k : known_keys())
      if (k.name == key) best = &k;
  return best ? fmt::format(" — did you mean '{}.{}'?", best->section, best->name) : std::string();
}

std::string suggest_section(std::string_view name) {
  for (std::string_view s : kSections)
    if (edit_distance(name, s) <= 2) return fmt::format(" — did you mean '{}'?", s);
  return fmt::format("; the sections are [{}]", fmt::join(kSections, "], ["));
}

bool is_section(std::string_view s) {
  for (std::string_view k : kSections)
    if (k == s) return true;
  return false;
}

// What a TOML node is, for "got ..." in messages: `string "four"`, `float 4.0`, `table`.
std::string describe(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "string " + quote(n.as_string()->get());
    case toml::node_type::integer:
      return fmt::format("integer {}", n.as_integer()->get());
    case toml::node_type::floating_point:
      return "float " + float_text(n.as_floating_point()->get());
    case toml::node_type::boolean:
      return n.as_boolean()->get() ? "boolean true" : "boolean false";
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

// An array as TOML text, for messages: [0.7, "web"].
std::string to_text(const toml::array& a) {
  std::ostringstream out;
  out << toml::toml_formatter{a, toml::format_flags::none};
  return out.str();
}

// Converts one TOML node into one field, or throws naming the file and key.
struct Reader {
  const std::string& file;
  const std::map<std::string, std::string>& given_by;  // "section.key" → the flag that gave it

  std::string origin(const std::string& key) const {
    const auto it = given_by.find(key);
    return it == given_by.end() ? "" : fmt::format(" (from {})", it->second);
  }
  [[noreturn]] void fail(const std::string& key, std::string_view want, const toml::node& n) const {
    throw InputError(fmt::format("{}: '{}' must be {}, got {}{}", file, key, want, describe(n), origin(key)));
  }
  int64_t integer(const toml::node& n, const std::string& key, std::string_view want) const {
    if (!n.is_integer()) fail(key, want, n);
    return n.as_integer()->get();
  }
  double number(const toml::node& n, const std::string& key) const {
    if (n.is_integer()) return static_cast<double>(n.as_integer()->get());
    if (!n.is_floating_point()) fail(key, "a number", n);
    double d = n.as_floating_point()->get();
    if (!std::isfinite(d)) fail(key, "a finite number", n);
    return d;
  }

  void read(int64_t& out, const toml::node& n, const std::string& key) const { out = integer(n, key, "an integer"); }
  void read(int& out, const toml::node& n, const std::string& key) const {
    int64_t v = integer(n, key, "an integer");
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail(key, fmt::format("an integer in [{}, {}]", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()),
           n);
    out = static_cast<int>(v);
  }
  void read(uint64_t& out, const toml::node& n, const std::string& key) const {
    int64_t v = integer(n, key, "a non-negative integer");
    if (v < 0) fail(key, "a non-negative integer", n);
    out = static_cast<uint64_t>(v);
  }
  void read(double& out, const toml::node& n, const std::string& key) const { out = number(n, key); }
  void read(float& out, const toml::node& n, const std::string& key) const {
    double d = number(n, key);
    if (std::abs(d) > std::numeric_limits<float>::max()) fail(key, "a number in float32 range", n);
    out = static_cast<float>(d);
  }
  template <class I>
  requires std::is_integral_v<I>
  void read(std::vector<I>& out, const toml::node& n, const std::string& key) const {
    constexpr std::string_view kWant = "an array of integers, e.g. [3, 4, 4, 3]";
    if (!n.is_array()) fail(key, kWant, n);
    out.clear();
    for (const toml::node& e : *n.as_array()) {
      I v = 0;
      if (!e.is_integer()) fail(key, kWant, n);
      read(v, e, key);
      out.push_back(v);
    }
  }
  // moe.layers: an integer k (every k-th block is an MoE block) or a non-empty array of block indices.
  void read(MoeConfig& out, const toml::node& n, const std::string& key) const {
    constexpr std::string_view kWant =
        "an integer k (blocks 0, k, 2k, … are MoE blocks) or a non-empty array of block indices, e.g. [1, 3]";
    if (n.is_integer()) return read(out.every, n, key);
    if (!n.is_array() || n.as_array()->empty()) fail(key, kWant, n);
    for (const toml::node& e : *n.as_array())
      if (!e.is_integer()) fail(key, kWant, n);
    read(out.layers, n, key);
  }
  void read(PeakTflops& out, const toml::node& n, const std::string& key) const {
    if (n.is_string() && n.as_string()->get() == "auto") {
      out = PeakTflops{};
      return;
    }
    if (!n.is_integer() && !n.is_floating_point()) fail(key, "\"auto\" or a number (TFLOP/s per rank)", n);
    out = PeakTflops{false, number(n, key)};
  }
  void read(bool& out, const toml::node& n, const std::string& key) const {
    if (!n.is_boolean()) fail(key, "a boolean (true or false)", n);
    out = n.as_boolean()->get();
  }
  void read(std::string& out, const toml::node& n, const std::string& key) const {
    if (!n.is_string()) fail(key, "a string", n);
    out = n.as_string()->get();
  }
  // A prefix string, or a non-empty array of [weight > 0, "prefix"] pairs (data.train, data.valid).
  void read(std::vector<WeightedPrefix>& out, const toml::node& n, const std::string& key) const {
    constexpr std::string_view kWant = "a prefix string or a non-empty array of [weight, \"prefix\"] pairs";
    out.clear();
    if (n.is_string()) {
      if (!n.as_string()->get().empty()) out.push_back({1.0, n.as_string()->get()});
      return;
    }
    if (!n.is_array() || n.as_array()->empty()) fail(key, kWant, n);
    const toml::array& a = *n.as_array();
    for (size_t i = 0; i < a.size(); ++i) {
      const toml::array* pair = a[i].as_array();
      const toml::node* w = pair && pair->size() == 2 ? pair->get(0) : nullptr;
      const toml::node* p = pair && pair->size() == 2 ? pair->get(1) : nullptr;
      const bool ok = w && p && (w->is_integer() || w->is_floating_point()) && p->is_string() &&
                      !p->as_string()->get().empty();
      const double weight = ok ? w->value<double>().value_or(0.0) : 0.0;
      if (!ok || !std::isfinite(weight) || weight <= 0.0)
        throw InputError(fmt::format("{}: {}[{}] must be [weight, \"prefix\"] with weight > 0 and a non-empty "
                                     "prefix, got {}{}; e.g. {} = [[0.7, \"web\"], [0.3, \"code\"]]",
                                     file, key, i, pair ? to_text(*pair) : describe(a[i]), origin(key), key));
      out.push_back({weight, p->as_string()->get()});
    }
  }
  template <class E>
  requires std::is_enum_v<E>
  void read(E& out, const toml::node& n, const std::string& key) const {
    std::vector<std::string> names;
    for (const auto& sp : spellings(out)) {
      if (n.is_string() && n.as_string()->get() == sp.name) {
        out = sp.value;
        return;
      }
      names.push_back(quote(sp.name));
    }
    fail(key, fmt::format("one of {}", fmt::join(names, ", ")), n);
  }
};

std::string read_text_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    throw InputError(fmt::format("{}: cannot open config file ({}); check the --config path", path,
                                 std::generic_category().message(errno)));
  std::string text;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err)
    throw InputError(fmt::format("{}: cannot read config file ({}); check the --config path", path,
                                 std::generic_category().message(err)));
  return text;
}

toml::table parse_toml(const std::string& text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw InputError(
        fmt::format("{}: TOML syntax error at line {}, column {}: {}; fix the file (syntax: https://toml.io)", path,
                    e.source().begin.line, e.source().begin.column, e.description()));
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// {v = VALUE} for "--set section.key=VALUE": VALUE read as TOML; a word that is not TOML is a string.
toml::table parse_override_value(std::string_view text) {
  try {
    toml::table t = toml::parse(fmt::format("v = {}", text));
    if (t.size() == 1 && t.contains("v")) return t;
  } catch (const toml::parse_error&) {
  }
  toml::table t;
  t.insert("v", std::string(text));
  return t;
}

// Applies one FLAG ("--set", or "--default": kept only where the file and every --set left the key
// unset) to ROOT; returns "section.key", or "" for a default not taken.
std::string apply_override(toml::table& root, const std::string& file, std::string_view flag, const std::string& text) {
  size_t eq = text.find('=');
  std::string_view lhs = trim(std::string_view(text).substr(0, eq == std::string::npos ? 0 : eq));
  size_t dot = lhs.find('.');
  if (eq == std::string::npos || dot == std::string_view::npos || dot == 0 || dot + 1 == lhs.size() ||
      lhs.find('.', dot + 1) != std::string_view::npos)
    throw InputError(fmt::format("{}: {} '{}': expected section.key=value", file, flag, text));
  std::string section(lhs.substr(0, dot)), key(lhs.substr(dot + 1));
  if (!is_section(section))
    throw InputError(fmt::format("{}: {} '{}': unknown section '{}'{} {}", file, flag, text, section,
                                 suggest_section(section), kReference));
  if (!root.contains(section)) root.insert(section, toml::table{});
  toml::table* t = root.get_as<toml::table>(section);
  MT_CHECK(t, "section checked to be a table before overrides");
  toml::table value = parse_override_value(trim(std::string_view(text).substr(eq + 1)));
  if (flag == "--default") {
    if (!t->insert(key, std::move(*value.get("v"))).second) return "";  // a value already there stays
  } else {
    t->insert_or_assign(key, std::move(*value.get("v")));
  }
  return section + "." + key;
}

// load_config and load_config_text: TEXT parsed as if read from PATH (the name in messages).
Config load_config_from_text(const std::string& text, const std::string& path, const std::vector<std::string>& overrides,
                             const std::vector<std::string>& defaults) {
  toml::table root = parse_toml(text, path);

  // 1. Top level: only the known sections, each a table.
  for (const auto& [name, node] : root) {
    std::string_view s = name.str();
    if (!is_section(s)) {
      if (node.is_table())
        throw InputError(fmt::format("{}: unknown section '[{}]'{} {}", path, s, suggest_section(s), kReference));
      throw InputError(fmt::format("{}: unknown key '{}' at top level; keys belong in a [section]{} {}", path, s,
                                   suggest_key("", s), kReference));
    }
    if (!node.is_table())
      throw InputError(fmt::format("{}: '{}' must be a table (a [{}] section), got {}", path, s, s, describe(node)));
  }

  // 2. Overrides, into the parsed tree; later ones win. Then the defaults, where nothing set the key.
  std::map<std::string, std::string> given_by;
  for (const std::string& o : overrides) given_by[apply_override(root, path, "--set", o)] = "--set";
  for (const std::string& d : defaults)
    if (std::string key = apply_override(root, path, "--default", d); !key.empty()) given_by[key] = "--default";

  Reader reader{path, given_by};

  // 3. Unknown keys.
  for (const auto& [sname, snode] : root) {
    for (const auto& [kname, knode] : *snode.as_table()) {
      std::string full = fmt::format("{}.{}", sname.str(), kname.str());
      bool known = false;
      for (const Key& k : known_keys()) known |= (k.section == sname.str() && k.name == kname.str());
      if (!known) {
        std::string hint = suggest_key(sname.str(), kname.str());
        throw InputError(fmt::format("{}: unknown key '{}'{}{} {}", path, full,
                                     reader.origin(full),
                                     hint.empty() ? "; remove it or fix its spelling" : hint, kReference));
      }
    }
  }

  // 4. Values into the structs, then the single-field rules.
  Config cfg;
  cfg.source = path;
  for_each_field(cfg, [&](std::string_view s, std::string_view k, auto& field) {
    const toml::table* t = root.get_as<toml::table>(s);
    const toml::node* n = t ? t->get(k) : nullptr;
    if (n) reader.read(field, *n, fmt::format("{}.{}", s, k));
  });
  validate_config_fields(cfg);
  return cfg;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const std::vector<std::string>& defaults) {
  return load_config_from_text(read_text_file(path), path, overrides, defaults);
}

Config load_config_text(const std::string& toml_text, const std::string& source_name) {
  return load_config_from_text(toml_text, source_name, {}, {});
}

}  // namespace megatrain
