#include "trainer/model_compat.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

namespace megatrain {
namespace {

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

std::string join_section(const std::vector<std::string>& lines) {
  std::string text = "[model]\n";
  for (const auto& l : lines) text += l + "\n";
  return text;
}

}  // namespace

ModelChanges model_changes(const std::string& saved_toml, const Config& current) {
  const std::vector<std::string> was_lines = section_lines(saved_toml, "model"),
                                  now_lines = section_lines(config_to_toml(current), "model");
  const ModelConfig was = load_config_text(join_section(was_lines), "the checkpoint's [model]").model;
  const ModelConfig& now = current.model;
  ModelChanges out;
  for (const auto& line : now_lines) {
    if (std::find(was_lines.begin(), was_lines.end(), line) != was_lines.end()) continue;
    const std::string key = key_of(line);
    std::string old = "(absent)";
    for (const auto& l : was_lines)
      if (key_of(l) == key) old = l;
    const std::string text = fmt::format("model.{}: checkpoint has '{}', config has '{}'", key, old, line);
    if (key == "dropout" || key == "init_std")
      out.noted.push_back(text);
    else if (key == "norm_eps" || key == "rope_theta" ||
             (key == "max_seq_len" && now.position == PositionKind::rope && was.position == PositionKind::rope))
      out.warned.push_back(text);
    else if ((key == "n_kv_heads" && was.kv_heads() == now.kv_heads()) ||
             (key == "d_ff" && was.ffn_dim() == now.ffn_dim()))
      continue;
    else
      out.refused.push_back(text);
  }
  return out;
}

}  // namespace megatrain
