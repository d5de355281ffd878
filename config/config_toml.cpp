// Config → TOML text (config_to_toml): every key of the field table with its value.
#include <fmt/format.h>

#include <type_traits>

#include "config/config.h"
#include "config/config_fields.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

using config_fields::float_text;
using config_fields::quote;
using config_fields::spellings;

std::string to_toml_value(int v) { return fmt::format("{}", v); }
std::string to_toml_value(int64_t v) { return fmt::format("{}", v); }
std::string to_toml_value(uint64_t v) { return fmt::format("{}", v); }
std::string to_toml_value(float v) { return float_text(v); }
std::string to_toml_value(double v) { return float_text(v); }
std::string to_toml_value(bool v) { return v ? "true" : "false"; }
std::string to_toml_value(const std::string& v) { return quote(v); }
template <class I>
requires std::is_integral_v<I> std::string to_toml_value(const std::vector<I>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}
std::string to_toml_value(const PeakTflops& v) { return v.automatic ? quote("auto") : float_text(v.value); }
// moe.layers: the list of MoE blocks when given, else the integer `every`.
std::string to_toml_value(const MoeConfig& v) {
  return v.layers.empty() ? to_toml_value(v.every) : to_toml_value(v.layers);
}
// data.train / data.valid: "" when empty, the bare prefix for one entry of weight 1, else the pairs.
std::string to_toml_value(const std::vector<WeightedPrefix>& v) {
  if (v.empty()) return quote("");
  if (v.size() == 1 && v[0].weight == 1.0) return quote(v[0].prefix);
  std::vector<std::string> pairs;
  for (const WeightedPrefix& w : v) pairs.push_back(fmt::format("[{}, {}]", float_text(w.weight), quote(w.prefix)));
  return fmt::format("[{}]", fmt::join(pairs, ", "));
}
template <class E>
requires std::is_enum_v<E> std::string to_toml_value(E v) {
  for (const auto& sp : spellings(v))
    if (sp.value == v) return quote(sp.name);
  MT_CHECK(false, "enum value {} has no spelling", static_cast<int>(v));
  return {};
}

}  // namespace

std::string config_to_toml(const Config& cfg) {
  std::string out = fmt::format("# megatrain config; source = {}\n", quote(cfg.source));
  std::string_view current;
  config_fields::for_each_field(cfg, [&](std::string_view s, std::string_view k, auto& field) {
    if (s != current) out += fmt::format("\n[{}]\n", s), current = s;
    out += fmt::format("{} = {}\n", k, to_toml_value(field));
  });
  return out;
}

}  // namespace megatrain
