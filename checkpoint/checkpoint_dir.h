// The names in a checkpoint directory (docs/checkpoint-format.md): DIR/step_NNNNNNN folders, committed
// by the rename from DIR/step_NNNNNNN.tmp; DIR/latest, a pointer to the newest for people and tools;
// and the CKPT_INVALID message every refusal of a checkpoint is worded in.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kernels/check.h"

namespace megatrain {

std::string checkpoint_step_name(int64_t step);  // "step_0000042"

// 42 for "step_0000042"; nullopt for any other name (step_0000042.tmp included).
std::optional<int64_t> checkpoint_step_of(const std::string& name);

// The steps of DIR's committed folders (step_NNNNNNN, no .tmp), ascending; none when DIR is missing.
std::vector<int64_t> committed_steps(const std::filesystem::path& dir);

// What DIR/latest says. `step` is set when it names a step folder; else `problem` says why not
// ("missing" when there is no such file).
struct LatestPointer {
  std::optional<int64_t> step;
  std::string problem;
};
LatestPointer read_latest(const std::filesystem::path& dir);

// "CKPT_INVALID step=S file=FILE reason=REASON" (step=? when unknown) as a CheckpointError.
CheckpointError checkpoint_invalid(std::optional<int64_t> step, const std::string& file, const std::string& reason);

// The reason in a checkpoint file's error message: `message` without its "checkpoint FILE: " prefix
// (checkpoint/checkpoint_file.h words its errors so), for CKPT_INVALID's reason=.
std::string checkpoint_reason(const std::string& message, const std::string& file);

}  // namespace megatrain
