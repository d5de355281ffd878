#include "checkpoint/manifest.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <zlib.h>

#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "checkpoint/checkpoint_file.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& field, const std::string& expected) {
  throw CheckpointError(fmt::format("field \"{}\" is missing or wrong; expected {}", field, expected));
}

const Json& member(const Json& obj, const std::string& key, const std::string& field, const std::string& expected) {
  if (!obj.is_object() || !obj.contains(key)) bad(field, expected);
  return obj.at(key);
}

int64_t integer(const Json& obj, const std::string& key, const std::string& field, int64_t lo, int64_t hi) {
  const std::string expected = hi == std::numeric_limits<int64_t>::max() ? fmt::format("an integer >= {}", lo)
                                                                        : fmt::format("an integer in [{}, {}]", lo, hi);
  const Json& v = member(obj, key, field, expected);
  if (!v.is_number_integer()) bad(field, expected);
  const bool is_unsigned = v.is_number_unsigned();
  if (is_unsigned && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) bad(field, expected);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(field, expected);
  return x;
}

uint32_t crc(const Json& obj, const std::string& key, const std::string& field) {
  return static_cast<uint32_t>(integer(obj, key, field, 0, std::numeric_limits<uint32_t>::max()));
}

std::string text(const Json& obj, const std::string& key, const std::string& field) {
  const Json& v = member(obj, key, field, "a string");
  if (!v.is_string()) bad(field, "a string");
  return v.get<std::string>();
}

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

}  // namespace

Manifest manifest_for(const CheckpointMeta& meta, std::vector<TensorCrc> tensors, int64_t model_bytes,
                      uint32_t model_crc32, std::optional<int64_t> parent_step) {
  Manifest m;
  m.step = meta.state.step;
  m.consumed_samples = meta.state.consumed_samples;
  m.skipped_steps = meta.state.skipped_steps;
  m.parallel_layout_json = meta.layout_json;
  const std::string& config = meta.config_toml;
  m.config_crc32 = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(config.data()), static_cast<uInt>(config.size())));
  m.parent_step = parent_step;
  m.created_utc = utc_now();
  m.model_format_version = kCheckpointVersion;
  m.model_bytes = model_bytes;
  m.model_crc32 = model_crc32;
  m.tensors = std::move(tensors);
  return m;
}

std::string manifest_to_json(const Manifest& m) {
  Json tensors = Json::object();
  for (const TensorCrc& t : m.tensors) tensors[t.name] = t.crc32;
  Json j;
  j["format"] = kManifestFormat;
  j["format_version"] = kManifestVersion;
  j["step"] = m.step;
  j["consumed_samples"] = m.consumed_samples;
  j["skipped_steps"] = m.skipped_steps;
  j["parent_step"] = m.parent_step ? Json(*m.parent_step) : Json(nullptr);
  j["created_utc"] = m.created_utc;
  j["config_crc32"] = m.config_crc32;
  j["parallel_layout"] = Json::parse(m.parallel_layout_json);
  j["files"][kModelFile] = {{"format_version", m.model_format_version},
                            {"bytes", m.model_bytes},
                            {"crc32", m.model_crc32},
                            {"tensors", tensors}};
  return j.dump(2) + "\n";
}

Manifest manifest_from_json(const std::string& text_in) {
  Json j;
  try {
    j = Json::parse(text_in);
  } catch (const Json::parse_error& e) {
    throw CheckpointError(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) throw CheckpointError("not a JSON object");
  const std::string format = text(j, "format", "format");
  if (format != kManifestFormat)
    throw CheckpointError(fmt::format("format is \"{}\", expected \"{}\"", format, kManifestFormat));
  const int64_t version = integer(j, "format_version", "format_version", 1, kMax);
  if (version > kManifestVersion)
    throw CheckpointError(fmt::format("format_version {} is newer than this megatrain reads ({}); use the megatrain "
                                      "release that wrote it",
                                      version, kManifestVersion));
  Manifest m;
  m.step = integer(j, "step", "step", 0, kMax);
  m.consumed_samples = integer(j, "consumed_samples", "consumed_samples", 0, kMax);
  m.skipped_steps = integer(j, "skipped_steps", "skipped_steps", 0, kMax);
  if (!member(j, "parent_step", "parent_step", "an integer >= 0 or null").is_null())
    m.parent_step = integer(j, "parent_step", "parent_step", 0, kMax);
  m.created_utc = text(j, "created_utc", "created_utc");
  m.config_crc32 = crc(j, "config_crc32", "config_crc32");
  const Json& layout = member(j, "parallel_layout", "parallel_layout", "an object");
  if (!layout.is_object()) bad("parallel_layout", "an object");
  m.parallel_layout_json = layout.dump();
  const std::string f = fmt::format("files.{}", kModelFile);
  const Json& model = member(member(j, "files", "files", "an object"), kModelFile, f, "an object");
  m.model_format_version = integer(model, "format_version", f + ".format_version", 1, kMax);
  m.model_bytes = integer(model, "bytes", f + ".bytes", 0, kMax);
  m.model_crc32 = crc(model, "crc32", f + ".crc32");
  const Json& tensors = member(model, "tensors", f + ".tensors", "an object of CRC-32s");
  if (!tensors.is_object()) bad(f + ".tensors", "an object of CRC-32s");
  for (const auto& [name, value] : tensors.items())
    m.tensors.push_back({name, crc(tensors, name, fmt::format("{}.tensors.{}", f, name))});
  return m;
}

std::string utc_now() { return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr))); }

}  // namespace megatrain
