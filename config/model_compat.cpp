#include "config/model_compat.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "kernels/check.h"

namespace megatrain {
namespace {

// The sections of config_to_toml text that describe the architecture (model_compat.h).
constexpr const char* kArchitecture[] = {"model", "moe"};

// The "key = value" lines of one [section] of config_to_toml text.
std::vector<std::string> section_lines(const std::string& toml, const std::string& section) {
  std::vector<std::string> lines;
  std::istringstream in(toml);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("["))
      inside = line == "[" + section + "]";
    else if (inside && !line.empty())
      lines.push_back(line);
  }
  return lines;
}

std::string key_of(const std::string& line) { return line.substr(0, line.find(" =")); }

// The architecture sections of SAVED_TOML alone: the rest may name keys this binary no longer has.
std::string architecture_text(const std::string& saved_toml) {
  std::string text;
  for (const char* s : kArchitecture) {
    text += fmt::format("[{}]\n", s);
    for (const auto& l : section_lines(saved_toml, s)) text += l + "\n";
  }
  return text;
}

enum class Change { none, noted, warned, refused };

Change classify_model(const std::string& key, const ModelConfig& was, const ModelConfig& now) {
  if (key == "dropout" || key == "init_std") return Change::noted;
  if (key == "norm_eps" || key.starts_with("rope_") ||
      (key == "max_seq_len" && now.position == PositionKind::rope && was.position == PositionKind::rope))
    return Change::warned;
  if ((key == "n_kv_heads" && was.kv_heads() == now.kv_heads()) || (key == "d_ff" && was.ffn_dim() == now.ffn_dim()))
    return Change::none;
  return Change::refused;
}

bool same_moe_blocks(const ModelConfig& was, const ModelConfig& now) {
  for (int l = 0; l < std::max(was.n_layers, now.n_layers); ++l)
    if (was.moe.is_moe_layer(l) != now.moe.is_moe_layer(l)) return false;
  return true;
}

Change classify_moe(const std::string& key, const ModelConfig& was, const ModelConfig& now) {
  if (!was.moe.enabled() && !now.moe.enabled()) return Change::none;  // a dense model has no use for [moe]
  if (key == "aux_loss_coef" || key == "z_loss_coef" || key == "aux_free_bias") return Change::noted;
  if (key == "capacity_factor" || key == "drop_policy") return Change::warned;  // which tokens are dropped
  if ((key == "layers" && same_moe_blocks(was, now)) ||
      (key == "d_ff_expert" && was.expert_ffn_dim() == now.expert_ffn_dim()))
    return Change::none;
  return Change::refused;
}

}  // namespace

ModelChanges model_changes(const std::string& saved_toml, const Config& current) {
  // Printed again by this binary, so that a key the checkpoint lacks reads as the default it was
  // trained with (a checkpoint from before [moe] is a dense model) and both sides list the same keys.
  const Config saved = load_config_text(architecture_text(saved_toml), "the checkpoint's [model] and [moe]");
  const std::string was_toml = config_to_toml(saved), now_toml = config_to_toml(current);
  ModelChanges out;
  for (const std::string section : kArchitecture) {
    const std::vector<std::string> was_lines = section_lines(was_toml, section),
                                   now_lines = section_lines(now_toml, section);
    MT_CHECK(was_lines.size() == now_lines.size(), "[{}] printed with {} and {} keys", section, was_lines.size(),
             now_lines.size());
    for (size_t i = 0; i < now_lines.size(); ++i) {
      if (was_lines[i] == now_lines[i]) continue;
      const std::string key = key_of(now_lines[i]);
      const Change change = section == "model" ? classify_model(key, saved.model, current.model)
                                               : classify_moe(key, saved.model, current.model);
      const std::string text =
          fmt::format("{}.{}: checkpoint has '{}', config has '{}'", section, key, was_lines[i], now_lines[i]);
      if (change == Change::noted) out.noted.push_back(text);
      if (change == Change::warned) out.warned.push_back(text);
      if (change == Change::refused) out.refused.push_back(text);
    }
  }
  return out;
}

}  // namespace megatrain
