#include "checkpoint/checkpoint_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>

namespace megatrain {
namespace fs = std::filesystem;

std::string checkpoint_step_name(int64_t step) { return fmt::format("step_{:07}", step); }

std::optional<int64_t> checkpoint_step_of(const std::string& name) {
  if (name.size() != 12 || !name.starts_with("step_") || name.find_first_not_of("0123456789", 5) != std::string::npos)
    return std::nullopt;
  return std::stoll(name.substr(5));
}

std::vector<int64_t> committed_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  for (const auto& e : fs::directory_iterator(dir))
    if (const auto step = checkpoint_step_of(e.path().filename().string()); step && e.is_directory())
      steps.push_back(*step);
  std::sort(steps.begin(), steps.end());
  return steps;
}

LatestPointer read_latest(const fs::path& dir) {
  std::ifstream in(dir / "latest", std::ios::binary);
  if (!in) return {std::nullopt, "missing"};
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::string name = text;
  if (name.ends_with('\n')) name.pop_back();
  if (const auto step = checkpoint_step_of(name)) {
    if (fs::is_directory(dir / name)) return {step, ""};
    return {std::nullopt, fmt::format("it names {}, which does not exist", name)};
  }
  return {std::nullopt, fmt::format("it holds {:?}, not a checkpoint folder name such as \"step_0000100\"",
                                    text.substr(0, 40))};
}

CheckpointError checkpoint_invalid(std::optional<int64_t> step, const std::string& file, const std::string& reason) {
  return CheckpointError(
      fmt::format("CKPT_INVALID step={} file={} reason={}", step ? std::to_string(*step) : "?", file, reason));
}

std::string checkpoint_reason(const std::string& message, const std::string& file) {
  const std::string prefix = "checkpoint " + file + ": ";
  return message.starts_with(prefix) ? message.substr(prefix.size()) : message;
}

}  // namespace megatrain
