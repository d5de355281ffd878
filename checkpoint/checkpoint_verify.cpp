#include "checkpoint/checkpoint_verify.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/file_io.h"

namespace megatrain {
namespace fs = std::filesystem;
namespace {

// The CKPT_INVALID message of the folder's manifest check, or "" when the manifest (in `text`,
// "" when absent and optional) agrees with model.h5's size. Rank 0 only: reads the files.
std::string check_on_rank0(const fs::path& folder, ManifestRule rule, std::optional<int64_t> step, std::string& text) {
  const fs::path path = folder / kManifestFile, model = folder / kModelFile;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (rule == ManifestRule::optional && !fs::exists(path)) return "";
    return checkpoint_invalid(step, path.string(),
                              "missing or unreadable: a folder is committed only with its manifest.json, so this one "
                              "was never committed completely or lost it")
        .what();
  }
  text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  try {
    const Manifest m = manifest_from_json(text);
    if (step && m.step != *step)
      return checkpoint_invalid(step, path.string(), fmt::format("it is the manifest of step {}", m.step)).what();
    std::error_code ec;
    const auto size = fs::file_size(model, ec);
    if (ec) return checkpoint_invalid(step, model.string(), fmt::format("cannot be read ({})", ec.message())).what();
    if (static_cast<int64_t>(size) != m.model_bytes)
      return checkpoint_invalid(step, model.string(),
                                fmt::format("size {} bytes, manifest.json says {} (truncated or replaced)", size,
                                            m.model_bytes))
          .what();
  } catch (const CheckpointError& e) {
    return checkpoint_invalid(step, path.string(), e.what()).what();
  }
  return "";
}

}  // namespace

uint32_t file_crc32_shared(const fs::path& path, int64_t bytes, MPI_Comm comm) {
  const ckpt::ShardGroup group(comm);
  const int64_t slice = (bytes + group.size() - 1) / group.size();
  const int64_t begin = std::min(bytes, slice * group.rank()), end = std::min(bytes, begin + slice);
  std::optional<IoFailure> failure;
  uint32_t crc = 0;
  try {
    crc = file_crc32(path, begin, end - begin);
  } catch (const CheckpointIoError& e) {
    failure = IoFailure{e.what(), e.err()};
  }
  agree_on_io_failure(comm, failure);
  return group.combine({{0, begin, end - begin, crc}}, {bytes}, {path.string()})[0];
}

std::optional<Manifest> checkpoint_folder_check(const fs::path& folder, MPI_Comm comm, ManifestRule rule) {
  const ckpt::ShardGroup group(comm);
  std::optional<int64_t> step = checkpoint_step_of(folder.filename().string());
  std::string text;
  group.agree(group.rank() == 0 ? check_on_rank0(folder, rule, step, text) : "");
  group.broadcast(text);
  if (text.empty()) return std::nullopt;
  const Manifest m = manifest_from_json(text);
  if (!step) step = m.step;
  const fs::path model = folder / kModelFile;
  uint32_t crc = 0;
  try {
    crc = file_crc32_shared(model, m.model_bytes, comm);
  } catch (const CheckpointIoError& e) {
    throw checkpoint_invalid(step, model.string(), fmt::format("cannot be read ({})", e.what()));
  }
  if (crc != m.model_crc32)
    throw checkpoint_invalid(step, model.string(),
                             fmt::format("whole-file checksum (CRC-32) {:#010x}, manifest.json says {:#010x}: the file "
                                         "changed after it was saved (damaged)",
                                         crc, m.model_crc32));
  return m;
}

}  // namespace megatrain
