// HDF5 side of checkpoint files (checkpoint_file.h): attributes, datasets with global shapes, and
// the hyperslab transfers of each rank's pieces. Writes are collective MPI-IO; reads are
// independent, so the only collectives of a read are ShardGroup's, issued by every rank in order.
#include "checkpoint/checkpoint_file.h"

#include <hdf5.h>
#include <zlib.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/file_io.h"
#include "checkpoint/h5_attrs.h"
#include "checkpoint/mpi_io_failures.h"

namespace megatrain {
namespace {

const char* kKinds[] = {"params", "exp_avg", "exp_avg_sq"};

const FlatSlice& slice_of(const CheckpointPiece& t, int kind) {
  return kind == 0 ? t.params : kind == 1 ? t.exp_avg : t.exp_avg_sq;
}

// The piece that holds local tensor i ([Note: checkpoint pieces]).
const CheckpointPiece& piece_of(const CheckpointTensors& t, size_t i) {
  size_t k = 0;
  while (k + 1 < t.pieces.size() && t.pieces[k + 1].begin <= t.layout->offset(i)) ++k;
  return t.pieces[k];
}

// Where flat element `flat` (inside the slice) lives.
float* at(const FlatSlice& s, int64_t flat) { return s.data + (flat - s.begin); }

const ParamLayout& stored_of(const CheckpointTensors& t) { return t.stored ? *t.stored : *t.layout; }

// The part of flat range [begin, end) inside local tensor i, as offsets within the tensor (lo ≥ hi: none).
std::pair<int64_t, int64_t> within(const ParamLayout& layout, size_t i, int64_t begin, int64_t end) {
  const int64_t off = layout.offset(i);
  return {std::max(begin, off) - off, std::min(end, off + layout.local_shape(i).numel()) - off};
}

// For each stored tensor, its index in the rank's layout (−1: this rank holds none of it). Every
// local tensor must be a stored one of the same shape up to vocabulary padding rows; a mismatch is
// a bug, reported here as text so that every rank can be told.
std::vector<int> local_indices(const CheckpointTensors& t, std::string& error) {
  const ParamLayout& stored = stored_of(t);
  std::vector<int> local(stored.size(), -1);
  for (size_t i = 0; i < t.layout->size(); ++i) {
    const ParamSpec& spec = t.layout->spec(i);
    if (!stored.contains(spec.name)) {
      error = fmt::format("checkpoint: {} is not a stored tensor", spec.name);
      continue;
    }
    const size_t s = stored.index_of(spec.name);
    const Shape &a = spec.shape, &b = stored.spec(s).shape;
    bool same = a.ndim == b.ndim && (a[0] == b[0] || (spec.valid_rows >= 0 && spec.valid_rows <= b[0]));
    for (int d = 1; d < a.ndim && same; ++d) same = a[d] == b[d];
    if (!same) error = fmt::format("checkpoint: {} has global shape {} but is stored as {}", spec.name, a.str(), b.str());
    local[s] = static_cast<int>(i);
  }
  return local;
}

// Local flat ranges [range.begin, range.end) of tensor i as stored runs (ckpt::stored_runs).
std::vector<ckpt::Run> runs_in(const ParamLayout& layout, size_t i, FlatRange range, int64_t stored_numel) {
  const auto [lo, hi] = within(layout, i, range.begin, range.end);
  if (lo >= hi) return {};
  return ckpt::stored_runs(layout, i, lo, hi, stored_numel);
}

enum class Transfer { read, write };

// Reads or writes the stored elements of `runs` from/to the local tensor whose element 0 would be
// at flat position `tensor_flat` of `slice`; no runs select nothing (collective writes need every
// rank).
herr_t transfer(Transfer dir, hid_t dset, const Shape& shape, const std::vector<ckpt::Run>& runs,
                const FlatSlice& slice, int64_t tensor_flat, hid_t dxpl) {
  H5 fspace(H5Dget_space(dset), H5Sclose);
  const int64_t first = runs.empty() ? 0 : runs.front().local;
  const hsize_t n = static_cast<hsize_t>(runs.empty() ? 1 : runs.back().local + runs.back().n - first);
  H5 mspace(H5Screate_simple(1, &n, nullptr), H5Sclose);
  float none = 0.0f;
  float* data = &none;
  if (runs.empty()) {
    H5Sselect_none(fspace);
    H5Sselect_none(mspace);
  } else {
    data = at(slice, tensor_flat + first);
    H5S_seloper_t op = H5S_SELECT_SET;
    for (const ckpt::Box& b : ckpt::run_boxes(shape, runs)) {
      std::vector<hsize_t> start(b.start.begin(), b.start.begin() + shape.ndim);
      std::vector<hsize_t> count(b.count.begin(), b.count.begin() + shape.ndim);
      if (H5Sselect_hyperslab(fspace, op, start.data(), nullptr, count.data(), nullptr) < 0) return -1;
      op = H5S_SELECT_OR;
    }
    op = H5S_SELECT_SET;
    for (size_t r = 0; r < runs.size();) {  // the memory side: runs contiguous in local order merged
      size_t e = r + 1;
      while (e < runs.size() && runs[e - 1].local + runs[e - 1].n == runs[e].local) ++e;
      const hsize_t start = static_cast<hsize_t>(runs[r].local - first);
      const hsize_t count = static_cast<hsize_t>(runs[e - 1].local + runs[e - 1].n - runs[r].local);
      if (H5Sselect_hyperslab(mspace, op, &start, nullptr, &count, nullptr) < 0) return -1;
      op = H5S_SELECT_OR;
      r = e;
    }
  }
  return dir == Transfer::write ? H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, data)
                                : H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, data);
}

// The CRC pieces of `runs` of dataset `dataset`, read from the local tensor at `tensor_flat`.
void add_pieces(std::vector<ckpt::CrcPiece>& out, int64_t dataset, const std::vector<ckpt::Run>& runs,
                const FlatSlice& slice, int64_t tensor_flat) {
  for (const ckpt::Run& r : runs)
    out.push_back({dataset, r.global * 4, r.n * 4, ckpt::crc_floats(at(slice, tensor_flat + r.local), r.n)});
}

// The dataset names and byte sizes of a file, in dataset order (kind-major).
struct Datasets {
  std::vector<std::string> names;
  std::vector<int64_t> bytes;
};
Datasets datasets_of(const ParamLayout& stored) {
  Datasets d;
  for (const char* kind : kKinds)
    for (size_t s = 0; s < stored.size(); ++s) {
      d.names.push_back(fmt::format("{}/{}", kind, stored.spec(s).name));
      d.bytes.push_back(stored.spec(s).shape.numel() * 4);
    }
  return d;
}

CheckpointMeta read_meta(const AttrReader& r) {
  const std::string format = r.str(r.file, "format");
  if (format != kCheckpointFormat) r.fail(fmt::format("format is '{}', expected '{}'", format, kCheckpointFormat));
  const int64_t version = r.i64(r.file, "format_version");
  if (version < 1 || version > kCheckpointVersion)
    r.fail(fmt::format("format version {} is not supported (this megatrain reads versions 1 to {}); use the "
                       "megatrain release that wrote it",
                       version, kCheckpointVersion));
  CheckpointMeta m;
  m.state.step = r.i64(r.file, "step");
  m.state.consumed_samples = r.i64(r.file, "consumed_samples");
  m.state.seed = static_cast<uint64_t>(r.i64(r.file, "seed"));
  m.config_toml = r.str(r.file, "config");
  m.layout_json = r.str(r.file, "parallel_layout");
  if (version >= 3) {
    m.state.skipped_steps = r.i64(r.file, "skipped_steps");
    m.state.loss_scale = r.f64(r.file, "loss_scale");
    m.state.loss_scale_growth_tracker = r.i64(r.file, "loss_scale_growth_tracker");
    m.state.loss_scale_hysteresis_tracker = r.i64(r.file, "loss_scale_hysteresis_tracker");
  }
  // Version 1 files carry no checksum of these; later ones must match theirs.
  if (version >= 2 && r.u32(r.file, "meta_crc32") != checkpoint_meta_crc32(m, version))
    r.fail("its root attributes (step, consumed_samples, seed, config, parallel_layout and the loss scaler's) do "
           "not match meta_crc32: the file is damaged; load another checkpoint");
  return m;
}

H5 open_for_read(const std::string& path) {
  quiet_hdf5();
  H5 f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.ok())
    throw CheckpointError(fmt::format("checkpoint {}: cannot be opened as HDF5 (missing, truncated or not a checkpoint)",
                                 path));
  return f;
}

// Why `t` cannot be used (a bug in the caller): a slice misses the partition, a non-empty slice
// has no data, or the local tensors do not match the stored ones. Empty when usable.
std::string misuse(const CheckpointTensors& t, std::vector<int>& local) {
  if (t.layout == nullptr) return "checkpoint: no layout";
  if (t.pieces.empty() || t.pieces.front().begin != 0) return "checkpoint: no piece starts at flat element 0";
  for (const CheckpointPiece& p : t.pieces)
    for (int kind = 0; kind < 3; ++kind) {
      const FlatSlice& s = slice_of(p, kind);
      if ((p.part_begin < p.part_end && (s.begin > p.part_begin || s.end < p.part_end)) ||
          (s.begin < s.end && s.data == nullptr))
        return fmt::format("checkpoint: the {} slice [{}, {}) does not hold the partition [{}, {})", kKinds[kind],
                           s.begin, s.end, p.part_begin, p.part_end);
    }
  std::string error;
  local = local_indices(t, error);
  return error;
}

// What one rank's local read produced: the stored checksums and the CRCs of the pieces it verifies.
struct LocalRead {
  CheckpointMeta meta;
  std::vector<uint32_t> stored;
  std::vector<ckpt::CrcPiece> pieces;
};

// Everything a read does without talking to other ranks; the first problem is thrown as
// CheckpointError, or as check_meta's InputError.
void read_local(const std::string& path, const CheckpointTensors& t, const std::vector<int>& local,
                const CheckpointMetaCheck& check_meta, LocalRead& out) {
  H5 f = open_for_read(path);
  const AttrReader r{path, f};
  out.meta = read_meta(r);
  if (check_meta) check_meta(out.meta);
  const ParamLayout &layout = *t.layout, &stored = stored_of(t);
  for (int kind = 0; kind < 3; ++kind) {
    if (H5Lexists(f, kKinds[kind], H5P_DEFAULT) <= 0) r.fail(fmt::format("group '{}' is missing", kKinds[kind]));
    H5 group(H5Gopen2(f, kKinds[kind], H5P_DEFAULT), H5Gclose);
    for (size_t s = 0; s < stored.size(); ++s) {
      const ParamSpec& spec = stored.spec(s);
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
      H5 a = r.attr(dset, "crc32", where);
      uint32_t want = 0;
      if (H5Aread(a, H5T_NATIVE_UINT32, &want) < 0) r.fail(fmt::format("{}: its crc32 is unreadable", where));
      out.stored.push_back(want);
      if (local[s] < 0) continue;
      const auto i = static_cast<size_t>(local[s]);
      const CheckpointPiece& piece = piece_of(t, i);
      const FlatSlice& slice = slice_of(piece, kind);
      const FlatRange part{piece.part_begin, piece.part_end};
      const int64_t off = layout.offset(i), numel = spec.shape.numel();
      const auto [lo, hi] = within(layout, i, slice.begin, slice.end);
      if (lo < hi) std::fill(at(slice, off + lo), at(slice, off + hi), 0.0f);  // padding rows not stored stay 0
      const std::vector<ckpt::Run> runs = runs_in(layout, i, {slice.begin, slice.end}, numel);
      if (transfer(Transfer::read, dset, spec.shape, runs, slice, off, H5P_DEFAULT) < 0)
        r.fail(fmt::format("{} cannot be read (file truncated or damaged)", where));
      const auto dataset = static_cast<int64_t>(out.stored.size() - 1);
      for (const FlatRange& o : layout.owned())  // this rank's share of the pieces that verify the tensor
        add_pieces(out.pieces, dataset, runs_in(layout, i, flat_intersect(o, part), numel), slice, off);
    }
  }
}

CheckpointMeta read_sharded(const std::string& path, const CheckpointTensors& t, const ckpt::ShardGroup& group,
                            const CheckpointMetaCheck& check_meta) {
  std::vector<int> local;
  group.agree_misuse(misuse(t, local));
  LocalRead read;
  std::string error;
  bool refused = false;  // by check_meta: the caller's input is at fault, not the file
  try {
    read_local(path, t, local, check_meta, read);
  } catch (const CheckpointError& e) {
    error = e.what();
  } catch (const InputError& e) {
    error = e.what();
    refused = true;
  }
  try {
    group.agree(error);  // from here on every rank has read every dataset's metadata
  } catch (const CheckpointError& e) {
    if (refused) throw InputError(e.what());  // check_meta runs on the same metadata everywhere
    throw;
  }
  const Datasets datasets = datasets_of(stored_of(t));
  const std::vector<uint32_t> crcs = group.combine(read.pieces, datasets.bytes, datasets.names);
  for (size_t d = 0; d < crcs.size() && error.empty(); ++d)
    if (crcs[d] != read.stored[d])
      error = fmt::format("checkpoint {}: tensor {} fails its checksum (data damaged)", path, datasets.names[d]);
  group.agree(error);
  return read.meta;
}

}  // namespace

CheckpointTensors checkpoint_tensors_full(const ParamLayout& layout, float* params, float* exp_avg, float* exp_avg_sq,
                                          int rank, int ranks) {
  const int64_t n = layout.total();
  const FlatRange part = flat_partition(n, rank, ranks);
  return {&layout, {params, 0, n}, {exp_avg, 0, n}, {exp_avg_sq, 0, n}, part.begin, part.end};
}

uint32_t checkpoint_meta_crc32(const CheckpointMeta& meta, int64_t version) {
  const TrainState& st = meta.state;
  std::string text = fmt::format("step={}\nconsumed_samples={}\nseed={}\nconfig={}\nparallel_layout={}\n", st.step,
                                 st.consumed_samples, st.seed, meta.config_toml, meta.layout_json);
  if (version >= 3)
    text += fmt::format("skipped_steps={}\nloss_scale={}\nloss_scale_growth_tracker={}\nloss_scale_hysteresis_tracker={}\n",
                        st.skipped_steps, st.loss_scale, st.loss_scale_growth_tracker, st.loss_scale_hysteresis_tracker);
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

CheckpointWritten checkpoint_file_write(const std::string& path, const CheckpointTensors& t,
                                        const CheckpointMeta& meta, const Comm& comm) {
  quiet_hdf5();
  const ckpt::ShardGroup group(comm.handle());
  std::vector<int> local;
  group.agree_misuse(misuse(t, local));
  H5 fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_mpio(fapl, comm.handle(), MPI_INFO_NULL);
  IoFailureLog failures;
  H5 file(H5I_INVALID_HID, H5Fclose);
  failures.run([&] { return (file = H5(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose)).ok(); },
               "creating " + path);
  agree_on_io_failure(comm.handle(), failures.first());  // nothing can go on without the file
  write_attr_str(file, "format", kCheckpointFormat);
  write_attr_i64(file, "format_version", kCheckpointVersion);
  write_attr_i64(file, "step", meta.state.step);
  write_attr_i64(file, "consumed_samples", meta.state.consumed_samples);
  write_attr_i64(file, "seed", static_cast<int64_t>(meta.state.seed));
  write_attr_str(file, "config", meta.config_toml);
  write_attr_str(file, "parallel_layout", meta.layout_json);
  write_attr_i64(file, "skipped_steps", meta.state.skipped_steps);
  write_attr_f64(file, "loss_scale", meta.state.loss_scale);
  write_attr_i64(file, "loss_scale_growth_tracker", meta.state.loss_scale_growth_tracker);
  write_attr_i64(file, "loss_scale_hysteresis_tracker", meta.state.loss_scale_hysteresis_tracker);
  write_attr_u32(file, "meta_crc32", checkpoint_meta_crc32(meta));
  write_attr_str(file, "rng", "philox4x32-10 counter-based; state = seed (all streams keyed by global indices)");
  write_attr_str(file, "lr_schedule", "stateless; position = step - skipped_steps");
  write_attr_str(file, "loss_scaler",
                 meta.state.loss_scale > 0.0 ? "dynamic (fp16): loss_scale, loss_scale_growth_tracker, loss_scale_hysteresis_tracker"
                                             : "none (fp32 or bf16 training)");
  H5 dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_INDEPENDENT);  // each rank's pieces are large: no two-phase exchange
  H5 dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);  // the writers' pieces tile every tensor: each element is written once
  const ParamLayout &layout = *t.layout, &stored = stored_of(t);
  std::vector<H5> dsets;
  std::vector<ckpt::CrcPiece> pieces;
  CheckpointWritten written;
  bool going = true;  // no rank has failed yet
  for (int kind = 0; kind < 3 && going; ++kind) {
    H5 group_h(H5Gcreate2(file, kKinds[kind], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    for (size_t s = 0; s < stored.size() && going; ++s) {
      const ParamSpec& spec = stored.spec(s);
      const std::string name = fmt::format("{}/{}", kKinds[kind], spec.name);
      std::vector<hsize_t> dims(spec.shape.dim.begin(), spec.shape.dim.begin() + spec.shape.ndim);
      H5 fspace(H5Screate_simple(spec.shape.ndim, dims.data(), nullptr), H5Sclose);
      H5 dset(H5I_INVALID_HID, H5Dclose);
      failures.run([&] {
        return (dset = H5(H5Dcreate2(group_h, spec.name.c_str(), H5T_IEEE_F32LE, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                          H5Dclose)).ok();
      }, fmt::format("creating dataset {} in {}", name, path));
      // The write below is collective: issued only while every rank has had no failure (so every
      // rank has the dataset); after one, nothing more is written into a file that is given up.
      int ok = failures.first() ? 0 : 1;
      MT_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm.handle()) == MPI_SUCCESS,
               "checkpoint: allreduce failed");
      if (!(going = ok != 0)) break;
      std::vector<ckpt::Run> runs;
      int64_t off = 0;
      FlatSlice slice;
      if (local[s] >= 0) {
        const auto i = static_cast<size_t>(local[s]);
        const CheckpointPiece& piece = piece_of(t, i);
        slice = slice_of(piece, kind);
        const FlatRange part{piece.part_begin, piece.part_end};
        off = layout.offset(i);
        for (const FlatRange& o : layout.owned())  // every element once, by the rank that owns it
          for (const ckpt::Run& r : runs_in(layout, i, flat_intersect(o, part), spec.shape.numel())) runs.push_back(r);
      }
      failures.run([&] { return transfer(Transfer::write, dset, spec.shape, runs, slice, off, dxpl) >= 0; },
                   fmt::format("writing {} to {}", name, path));
      add_pieces(pieces, static_cast<int64_t>(dsets.size()), runs, slice, off);
      for (const ckpt::Run& r : runs) written.bytes += r.n * 4;
      dsets.push_back(std::move(dset));
      written.tensors.push_back({name, 0});
    }
  }
  if (going) {
    const Datasets datasets = datasets_of(stored);
    // Every rank gets the same values: attribute writes are collective.
    const std::vector<uint32_t> crcs = group.combine(pieces, datasets.bytes, datasets.names);
    for (size_t d = 0; d < dsets.size(); ++d) {
      write_attr_u32(dsets[d], "crc32", crcs[d]);
      written.tensors[d].crc32 = crcs[d];
    }
  }
  failures.run([&] { return H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0; }, "flushing " + path);
  dsets.clear();
  failures.run([&] { return file.close() >= 0; }, "closing " + path);
  agree_on_io_failure(comm.handle(), failures.first());
  return written;
}

CheckpointMeta checkpoint_file_read_meta(const std::string& path) {
  H5 f = open_for_read(path);
  return read_meta(AttrReader{path, f});
}

CheckpointMeta checkpoint_file_read(const std::string& path, const CheckpointTensors& t, const Comm& comm,
                                    const CheckpointMetaCheck& check_meta) {
  return read_sharded(path, t, ckpt::ShardGroup(comm.handle()), check_meta);
}

CheckpointMeta checkpoint_file_read(const std::string& path, const CheckpointTensors& t) {
  return read_sharded(path, t, ckpt::ShardGroup(MPI_COMM_NULL), {});
}

}  // namespace megatrain
