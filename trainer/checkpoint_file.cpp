#include "trainer/checkpoint_file.h"

#include <hdf5.h>
#include <zlib.h>

#include <utility>
#include <vector>

namespace megatrain {
namespace {

// Owns one HDF5 handle; closes it with the matching H5?close.
class H5 {
 public:
  H5(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  H5(H5&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
  ~H5() {
    if (id_ >= 0) close_(id_);
  }
  operator hid_t() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

const char* kKinds[] = {"params", "exp_avg", "exp_avg_sq"};

float* buffer_of(const CheckpointTensors& t, int kind) {
  return kind == 0 ? t.params : kind == 1 ? t.exp_avg : t.exp_avg_sq;
}

uint32_t crc_of(const float* data, int64_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(data);
  int64_t left = n * 4;
  while (left > 0) {
    const uInt chunk = static_cast<uInt>(std::min<int64_t>(left, 1 << 30));
    crc = crc32(crc, bytes, chunk);
    bytes += chunk;
    left -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

void write_attr_i64(hid_t obj, const char* name, int64_t v) {
  H5 space(H5Screate(H5S_SCALAR), H5Sclose);
  H5 a(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  MT_CHECK(a.ok() && H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0, "HDF5: cannot write attribute {}", name);
}

void write_attr_u32(hid_t obj, const char* name, uint32_t v) {
  H5 space(H5Screate(H5S_SCALAR), H5Sclose);
  H5 a(H5Acreate2(obj, name, H5T_STD_U32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  MT_CHECK(a.ok() && H5Awrite(a, H5T_NATIVE_UINT32, &v) >= 0, "HDF5: cannot write attribute {}", name);
}

void write_attr_str(hid_t obj, const char* name, const std::string& v) {
  H5 type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, std::max<size_t>(1, v.size()));
  H5 space(H5Screate(H5S_SCALAR), H5Sclose);
  H5 a(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  std::string padded = v.empty() ? std::string(1, '\0') : v;
  MT_CHECK(a.ok() && H5Awrite(a, type, padded.data()) >= 0, "HDF5: cannot write attribute {}", name);
}

struct Reader {
  const std::string& path;
  hid_t file;

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("checkpoint {}: {}", path, what));
  }
  H5 attr(hid_t obj, const char* name, const std::string& where) const {
    if (H5Aexists(obj, name) <= 0) fail(fmt::format("{} has no attribute '{}' (not a megatrain checkpoint?)", where, name));
    return H5(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  }
  int64_t i64(hid_t obj, const char* name) const {
    H5 a = attr(obj, name, "root");
    int64_t v = 0;
    if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) fail(fmt::format("attribute '{}' is unreadable", name));
    return v;
  }
  std::string str(hid_t obj, const char* name) const {
    H5 a = attr(obj, name, "root");
    H5 type(H5Aget_type(a), H5Tclose);
    if (H5Tget_class(type) != H5T_STRING) fail(fmt::format("attribute '{}' is not a string", name));
    std::string v(H5Tget_size(type), '\0');
    if (H5Aread(a, type, v.data()) < 0) fail(fmt::format("attribute '{}' is unreadable", name));
    while (!v.empty() && v.back() == '\0') v.pop_back();
    return v;
  }
};

CheckpointMeta read_meta(const Reader& r) {
  const std::string format = r.str(r.file, "format");
  if (format != kCheckpointFormat) r.fail(fmt::format("format is '{}', expected '{}'", format, kCheckpointFormat));
  const int64_t version = r.i64(r.file, "format_version");
  if (version != kCheckpointVersion)
    r.fail(fmt::format("format version {} is not supported (this megatrain reads version {}); use the megatrain "
                       "release that wrote it",
                       version, kCheckpointVersion));
  CheckpointMeta m;
  m.state.step = r.i64(r.file, "step");
  m.state.consumed_samples = r.i64(r.file, "consumed_samples");
  m.state.seed = static_cast<uint64_t>(r.i64(r.file, "seed"));
  m.config_toml = r.str(r.file, "config");
  m.layout_json = r.str(r.file, "parallel_layout");
  return m;
}

H5 open_for_read(const std::string& path) {
  quiet_hdf5();
  H5 f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.ok())
    throw InputError(fmt::format("checkpoint {}: cannot be opened as HDF5 (missing, truncated or not a checkpoint)",
                                 path));
  return f;
}

}  // namespace

void checkpoint_file_write(const std::string& path, const CheckpointTensors& t, const CheckpointMeta& meta,
                           const Comm& comm, int writer) {
  quiet_hdf5();
  const bool mine = comm.rank() == writer;
  H5 fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_mpio(fapl, comm.handle(), MPI_INFO_NULL);
  H5 file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose);
  MT_CHECK(file.ok(), "cannot create checkpoint file {} (is the disk full or the folder read-only?)", path);
  write_attr_str(file, "format", kCheckpointFormat);
  write_attr_i64(file, "format_version", kCheckpointVersion);
  write_attr_i64(file, "step", meta.state.step);
  write_attr_i64(file, "consumed_samples", meta.state.consumed_samples);
  write_attr_i64(file, "seed", static_cast<int64_t>(meta.state.seed));
  write_attr_str(file, "config", meta.config_toml);
  write_attr_str(file, "parallel_layout", meta.layout_json);
  write_attr_str(file, "rng", "philox4x32-10 counter-based; state = seed (all streams keyed by global indices)");
  write_attr_str(file, "lr_schedule", "stateless; position = step");
  write_attr_str(file, "loss_scaler", "none (fp32 training)");
  H5 dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  const ParamLayout& layout = *t.layout;
  for (int kind = 0; kind < 3; ++kind) {
    H5 group(H5Gcreate2(file, kKinds[kind], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    for (size_t i = 0; i < layout.size(); ++i) {
      const ParamSpec& spec = layout.spec(i);
      std::vector<hsize_t> dims(spec.shape.dim.begin(), spec.shape.dim.begin() + spec.shape.ndim);
      H5 fspace(H5Screate_simple(spec.shape.ndim, dims.data(), nullptr), H5Sclose);
      H5 mspace(H5Screate_simple(spec.shape.ndim, dims.data(), nullptr), H5Sclose);
      H5 dset(H5Dcreate2(group, spec.name.c_str(), H5T_IEEE_F32LE, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
      MT_CHECK(dset.ok(), "cannot create dataset {}/{} in {}", kKinds[kind], spec.name, path);
      if (!mine) {
        H5Sselect_none(fspace);
        H5Sselect_none(mspace);
      }
      const float* data = buffer_of(t, kind) + layout.offset(i);
      MT_CHECK(H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, data) >= 0, "writing {}/{} to {} failed",
               kKinds[kind], spec.name, path);
      uint32_t crc = mine ? crc_of(data, spec.shape.numel()) : 0;
      MPI_Bcast(&crc, 1, MPI_UINT32_T, writer, comm.handle());
      write_attr_u32(dset, "crc32", crc);
    }
  }
  MT_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0, "flushing {} failed", path);
}

CheckpointMeta checkpoint_file_read_meta(const std::string& path) {
  H5 f = open_for_read(path);
  return read_meta(Reader{path, f});
}

CheckpointMeta checkpoint_file_read(const std::string& path, const CheckpointTensors& t) {
  H5 f = open_for_read(path);
  const Reader r{path, f};
  CheckpointMeta meta = read_meta(r);
  const ParamLayout& layout = *t.layout;
  for (int kind = 0; kind < 3; ++kind) {
    if (H5Lexists(f, kKinds[kind], H5P_DEFAULT) <= 0) r.fail(fmt::format("group '{}' is missing", kKinds[kind]));
    H5 group(H5Gopen2(f, kKinds[kind], H5P_DEFAULT), H5Gclose);
    for (size_t i = 0; i < layout.size(); ++i) {
      const ParamSpec& spec = layout.spec(i);
      const std::string where = fmt::format("tensor {}/{}", kKinds[kind], spec.name);
      if (H5Lexists(group, spec.name.c_str(), H5P_DEFAULT) <= 0)
        r.fail(fmt::format("{} is missing (the checkpoint was written for another model)", where));
      H5 dset(H5Dopen2(group, spec.name.c_str(), H5P_DEFAULT), H5Dclose);
      H5 space(H5Dget_space(dset), H5Sclose);
      std::vector<hsize_t> dims(static_cast<size_t>(std::max(0, H5Sget_simple_extent_ndims(space))));
      H5Sget_simple_extent_dims(space, dims.data(), nullptr);
      Shape got;
      for (hsize_t d : dims) got.dim[static_cast<size_t>(got.ndim++)] = static_cast<int64_t>(d);
      if (!(got == spec.shape))
        r.fail(fmt::format("{} has shape {}, the model expects {} (model config differs)", where, got.str(),
                           spec.shape.str()));
      float* data = buffer_of(t, kind) + layout.offset(i);
      if (H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        r.fail(fmt::format("{} cannot be read (file truncated or damaged)", where));
      H5 a = r.attr(dset, "crc32", where);
      uint32_t want = 0;
      H5Aread(a, H5T_NATIVE_UINT32, &want);
      if (crc_of(data, spec.shape.numel()) != want)
        r.fail(fmt::format("{} fails its checksum (data damaged)", where));
    }
  }
  return meta;
}

}  // namespace megatrain
