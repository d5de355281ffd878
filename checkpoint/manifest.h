// manifest.json, the record rank 0 writes into a checkpoint folder last, just before the folder is
// committed (docs/checkpoint-format.md): what was saved (step, data position, layout, a CRC of the
// config) and what model.h5 must be (its byte size, its whole-file CRC-32 and each tensor's CRC).
// A folder is committed only with its manifest, so a loader that finds the manifest missing,
// unreadable or disagreeing with model.h5 refuses the folder. Invariant: manifest_from_json of
// manifest_to_json(m) gives back m.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megatrain {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kManifestFormat = "megatrain-checkpoint-manifest";
inline constexpr int64_t kManifestVersion = 1;
inline constexpr const char* kModelFile = "model.h5";

struct TensorCrc {
  std::string name;  // dataset path in model.h5: "params/embed.wte", "exp_avg/…", "exp_avg_sq/…"
  uint32_t crc32 = 0;
  friend bool operator==(const TensorCrc&, const TensorCrc&) = default;
};

struct Manifest {
  int64_t step = 0;
  int64_t consumed_samples = 0;
  int64_t skipped_steps = 0;
  std::string parallel_layout_json;  // {"tp":…,"pp":…,"cp":…,"ep":…,"dp":…,"world":…}, stored as an object
  uint32_t config_crc32 = 0;         // zlib CRC-32 of the resolved config's TOML text
  std::optional<int64_t> parent_step;  // the newest checkpoint committed before this one in its folder
  std::string created_utc;             // "2025-01-31T12:00:00Z"
  // model.h5
  int64_t model_format_version = 0;  // its format_version attribute
  int64_t model_bytes = 0;
  uint32_t model_crc32 = 0;  // of the whole file
  std::vector<TensorCrc> tensors;  // each dataset's crc32 attribute, in file order
  friend bool operator==(const Manifest&, const Manifest&) = default;
};

struct CheckpointMeta;  // checkpoint/checkpoint_file.h

// The manifest of a model.h5 just written with `meta` (in the current format version): its
// tensors' CRCs, its size and whole-file CRC, the folder's parent step; created now.
Manifest manifest_for(const CheckpointMeta& meta, std::vector<TensorCrc> tensors, int64_t model_bytes,
                      uint32_t model_crc32, std::optional<int64_t> parent_step);

// The manifest as indented JSON text.
std::string manifest_to_json(const Manifest& m);

// Parses manifest.json text and checks its schema. Throws CheckpointError whose message is the
// reason alone (e.g. `field "files.model.h5.bytes" is missing; expected an integer >= 0`): the
// caller names the file.
Manifest manifest_from_json(const std::string& text);

// The current time as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_now();

}  // namespace megatrain
