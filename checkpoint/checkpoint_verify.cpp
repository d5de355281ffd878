#include "checkpoint/checkpoint_verify.h"

#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/crc32.h"
#include "checkpoint/file_io.h"
#include "checkpoint/h5_attrs.h"

namespace megatrain {
namespace fs = std::filesystem;
namespace {

constexpr const char* kGroups[] = {"params", "exp_avg", "exp_avg_sq"};

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

// The CRC-32 of a dataset's bytes as stored (float32 little-endian), read in blocks of rows.
uint32_t dataset_crc(hid_t dset, const std::string& where, const AttrReader& r) {
  H5 fspace(H5Dget_space(dset), H5Sclose);
  const int ndim = std::max(0, H5Sget_simple_extent_ndims(fspace));
  std::vector<hsize_t> dims(static_cast<size_t>(ndim)), start(dims.size(), 0), count;
  H5Sget_simple_extent_dims(fspace, dims.data(), nullptr);
  count = dims;
  const hsize_t rows = ndim > 0 ? dims[0] : 1;
  hsize_t row = 1;
  for (int d = 1; d < ndim; ++d) row *= dims[static_cast<size_t>(d)];
  const hsize_t block = std::max<hsize_t>(1, (hsize_t{4} << 20) / std::max<hsize_t>(row, 1));
  std::vector<float> buf;
  uint32_t crc = 0;
  for (hsize_t r0 = 0; r0 < rows; r0 += block) {
    const hsize_t n = std::min(block, rows - r0) * row;
    buf.resize(n);
    H5 mspace(H5Screate_simple(1, &n, nullptr), H5Sclose);
    if (ndim > 0) {
      start[0] = r0;
      count[0] = std::min(block, rows - r0);
      H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    }
    if (H5Dread(dset, H5T_IEEE_F32LE, mspace, fspace, H5P_DEFAULT, buf.data()) < 0)
      r.fail(fmt::format("{} cannot be read (file truncated or damaged)", where));
    crc = crc32_update(crc, buf.data(), static_cast<size_t>(n) * 4);
  }
  return crc;
}

// Every dataset of the file with its crc32 attribute, each checked against the data; the first
// problem is a CheckpointError "checkpoint PATH: …".
std::vector<TensorCrc> verified_tensors(const std::string& path) {
  quiet_hdf5();
  H5 f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  const AttrReader r{path, f};
  if (!f.ok()) r.fail("cannot be opened as HDF5 (missing, truncated or not a checkpoint)");
  std::vector<TensorCrc> out;
  for (const char* kind : kGroups) {
    if (H5Lexists(f, kind, H5P_DEFAULT) <= 0) r.fail(fmt::format("group '{}' is missing", kind));
    H5 group(H5Gopen2(f, kind, H5P_DEFAULT), H5Gclose);
    H5G_info_t info{};
    if (H5Gget_info(group, &info) < 0) r.fail(fmt::format("group '{}' is unreadable", kind));
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (len < 0) r.fail(fmt::format("group '{}' is unreadable", kind));
      std::vector<char> buf(static_cast<size_t>(len) + 1);
      H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf.data(), buf.size(), H5P_DEFAULT);
      const std::string name(buf.data(), static_cast<size_t>(len));
      const std::string where = fmt::format("tensor {}/{}", kind, name);
      H5 dset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
      H5 type(H5Dget_type(dset), H5Tclose);
      if (!dset.ok() || H5Tequal(type, H5T_IEEE_F32LE) <= 0) r.fail(fmt::format("{} is not float32", where));
      H5 a = r.attr(dset, "crc32", where);
      uint32_t want = 0;
      if (H5Aread(a, H5T_NATIVE_UINT32, &want) < 0) r.fail(fmt::format("{}: its crc32 is unreadable", where));
      const uint32_t got = dataset_crc(dset, where, r);
      if (got != want)
        r.fail(fmt::format("{} fails its checksum: its data's CRC-32 is {:#010x}, its crc32 attribute {:#010x} (data "
                           "damaged)",
                           where, got, want));
      out.push_back({fmt::format("{}/{}", kind, name), want});
    }
  }
  return out;
}

// Why the tensors of model.h5 and those manifest.json lists differ; "" when they agree.
std::string tensor_mismatch(const std::vector<TensorCrc>& stored, const std::vector<TensorCrc>& listed) {
  std::map<std::string, uint32_t> in_manifest;
  for (const TensorCrc& t : listed) in_manifest[t.name] = t.crc32;
  for (const TensorCrc& t : stored) {
    const auto it = in_manifest.find(t.name);
    if (it == in_manifest.end()) return fmt::format("it lists no tensor {}, which model.h5 holds", t.name);
    if (it->second != t.crc32)
      return fmt::format("it gives tensor {} the CRC-32 {:#010x}, model.h5's crc32 attribute is {:#010x}", t.name,
                         it->second, t.crc32);
  }
  if (listed.size() != stored.size())
    return fmt::format("it lists {} tensors, model.h5 holds {}", listed.size(), stored.size());
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

FolderVerified checkpoint_folder_verify(const fs::path& folder) {
  const auto t0 = std::chrono::steady_clock::now();
  const Manifest m = *checkpoint_folder_check(folder, MPI_COMM_NULL, ManifestRule::required);
  const std::string file = (folder / kModelFile).string();
  std::vector<TensorCrc> stored;
  try {
    checkpoint_file_read_meta(file);
    stored = verified_tensors(file);
  } catch (const CheckpointError& e) {
    throw checkpoint_invalid(m.step, file, checkpoint_reason(e.what(), file));
  }
  if (const std::string why = tensor_mismatch(stored, m.tensors); !why.empty())
    throw checkpoint_invalid(m.step, (folder / kManifestFile).string(), why);
  return {m, m.model_bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace megatrain
