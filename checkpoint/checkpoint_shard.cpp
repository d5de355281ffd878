// Hyperslab boxes of a flat range, CRC pieces and the MPI agreement of sharded checkpoint I/O
// (see checkpoint_shard.h for the invariants).
#include "checkpoint/checkpoint_shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "checkpoint/crc32.h"
#include "kernels/check.h"

namespace megatrain::ckpt {
namespace {

void mpi_ok(int rc, const char* op) { MT_CHECK(rc == MPI_SUCCESS, "checkpoint: {} failed (MPI error {})", op, rc); }

// Appends the boxes of [lo, hi), offsets within the block that dimensions k… span under `prefix`
// (whose start/count are fixed for the dimensions before k).
void add_boxes(const Shape& shape, int k, Box prefix, int64_t lo, int64_t hi, std::vector<Box>& out) {
  const auto dim = [](int d) { return static_cast<size_t>(d); };
  int64_t inner = 1;
  for (int d = k + 1; d < shape.ndim; ++d) inner *= shape[d];
  const auto whole_rows = [&](int64_t a, int64_t b) {
    Box box = prefix;
    box.start[dim(k)] = a;
    box.count[dim(k)] = b - a;
    for (int d = k + 1; d < shape.ndim; ++d) box.start[dim(d)] = 0, box.count[dim(d)] = shape[d];
    out.push_back(box);
  };
  const auto within_row = [&](int64_t row, int64_t from, int64_t to) {
    Box sub = prefix;
    sub.start[dim(k)] = row;
    sub.count[dim(k)] = 1;
    add_boxes(shape, k + 1, sub, from, to, out);
  };
  int64_t a = lo / inner;
  const int64_t b = hi / inner, lo_rest = lo % inner, hi_rest = hi % inner;
  if (a == b) {  // inside one row of dimension k (never for the last dimension, where inner = 1)
    if (lo < hi) within_row(a, lo_rest, hi_rest);
    return;
  }
  if (lo_rest != 0) within_row(a++, lo_rest, inner);
  if (a < b) whole_rows(a, b);
  if (hi_rest != 0) within_row(b, 0, hi_rest);
}

// Rank `root`'s text, on every rank.
void broadcast_text(MPI_Comm comm, std::string& text, int root) {
  int64_t n = static_cast<int64_t>(text.size());
  mpi_ok(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm), "broadcast");
  text.resize(static_cast<size_t>(n));
  mpi_ok(MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, root, comm), "broadcast");
}

}  // namespace

std::vector<Box> range_boxes(const Shape& shape, int64_t lo, int64_t hi) {
  MT_CHECK(shape.ndim >= 1 && 0 <= lo && lo <= hi && hi <= shape.numel(), "range [{}, {}) of a tensor of shape {}",
           lo, hi, shape.str());
  std::vector<Box> out;
  add_boxes(shape, 0, Box{}, lo, hi, out);
  return out;
}

std::vector<Run> stored_runs(const ParamLayout& layout, size_t i, int64_t lo, int64_t hi, int64_t stored) {
  const Shape& local = layout.local_shape(i);
  MT_CHECK(0 <= lo && lo <= hi && hi <= local.numel(), "local range [{}, {}) of {} (shape {})", lo, hi,
           layout.spec(i).name, local.str());
  std::vector<Run> runs;
  // A local row is contiguous in the global tensor too (a whole row of a row split, one row's
  // columns of a column split, of the tensor or of one expert's matrix); a replicated tensor is one
  // run; a split vector runs element by element (merged below).
  const ParamSpec& spec = layout.spec(i);
  const int64_t inner = spec.split == TpSplit::replicated && !spec.expert ? std::max<int64_t>(hi - lo, 1)
                        : local.ndim == 1                                 ? 1
                                                                          : local[local.ndim - 1];
  for (int64_t a = lo; a < hi;) {
    const int64_t b = std::min(hi, (a / inner + 1) * inner), g = layout.global_index(i, a);
    const int64_t n = std::min(b, a + std::max<int64_t>(stored - g, 0)) - a;
    if (n > 0) {
      Run* last = runs.empty() ? nullptr : &runs.back();
      if (last && last->local + last->n == a && last->global + last->n == g) last->n += n;
      else runs.push_back({a, g, n});
    }
    a = b;
  }
  return runs;
}

std::vector<Box> run_boxes(const Shape& shape, const std::vector<Run>& runs) {
  std::vector<Box> out;
  const auto extends = [&](const Box& a, const Box& b) {
    for (int d = 1; d < shape.ndim; ++d) {
      const auto k = static_cast<size_t>(d);
      if (a.start[k] != b.start[k] || a.count[k] != b.count[k]) return false;
    }
    return a.start[0] + a.count[0] == b.start[0];
  };
  for (const Run& r : runs)
    for (const Box& b : range_boxes(shape, r.global, r.global + r.n)) {
      if (!out.empty() && extends(out.back(), b)) out.back().count[0] += b.count[0];
      else out.push_back(b);
    }
  return out;
}

uint32_t crc_floats(const float* data, int64_t n) { return crc32_update(0, data, static_cast<size_t>(n) * 4); }

ShardGroup::ShardGroup(MPI_Comm comm) : comm_(comm) {
  if (comm_ == MPI_COMM_NULL) return;
  mpi_ok(MPI_Comm_rank(comm_, &rank_), "comm_rank");
  mpi_ok(MPI_Comm_size(comm_, &size_), "comm_size");
}

void ShardGroup::agree(const std::string& error) const {
  int first = error.empty() ? size_ : rank_;
  if (comm_ != MPI_COMM_NULL) mpi_ok(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm_), "allreduce");
  if (first == size_) return;
  std::string text = error;
  if (comm_ != MPI_COMM_NULL) broadcast_text(comm_, text, first);
  throw CheckpointError(text);
}

void ShardGroup::agree_misuse(const std::string& error) const {
  try {
    agree(error);
  } catch (const InputError& e) {
    throw Error(e.what());
  }
}

std::vector<uint32_t> ShardGroup::combine(const std::vector<CrcPiece>& mine, const std::vector<int64_t>& dataset_bytes,
                                          const std::vector<std::string>& names) const {
  std::vector<int64_t> flat;
  for (const CrcPiece& p : mine) flat.insert(flat.end(), {p.dataset, p.offset, p.bytes, static_cast<int64_t>(p.crc)});
  std::vector<int64_t> all = flat;
  if (comm_ != MPI_COMM_NULL) {
    const int n = static_cast<int>(flat.size());
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    mpi_ok(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_), "gather");
    for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
    all.resize(rank_ == 0 ? static_cast<size_t>(displs.back() + counts.back()) : 0);
    mpi_ok(MPI_Gatherv(flat.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T, 0, comm_),
           "gatherv");
  }
  std::vector<uint32_t> crcs(dataset_bytes.size(), 0);
  std::string error;
  if (rank_ == 0) {
    std::vector<CrcPiece> pieces;
    for (size_t i = 0; i + 3 < all.size(); i += 4)
      pieces.push_back({all[i], all[i + 1], all[i + 2], static_cast<uint32_t>(all[i + 3])});
    std::sort(pieces.begin(), pieces.end(),
              [](const CrcPiece& a, const CrcPiece& b) { return std::tie(a.dataset, a.offset) < std::tie(b.dataset, b.offset); });
    std::vector<int64_t> covered(dataset_bytes.size(), 0);
    // combine(0, c, n) = c: the CRC of nothing followed by a piece is the piece's CRC.
    for (const CrcPiece& p : pieces) {
      const auto d = static_cast<size_t>(p.dataset);
      if (p.offset != covered.at(d)) {
        error = fmt::format("bytes [{}, {}) of {}", std::min(p.offset, covered[d]), std::max(p.offset, covered[d]),
                            names.at(d));
        break;
      }
      crcs[d] = crc32_combine_pieces(crcs[d], p.crc, p.bytes);
      covered[d] += p.bytes;
    }
    for (size_t d = 0; d < covered.size() && error.empty(); ++d)
      if (covered[d] != dataset_bytes[d])
        error = fmt::format("bytes [{}, {}) of {}", covered[d], dataset_bytes[d], names[d]);
    if (!error.empty())
      error = fmt::format("checkpoint: the ranks' pieces must tile every tensor exactly once; {} are covered twice "
                          "or never (a partition or sharer bug)",
                          error);
  }
  broadcast(error);
  if (!error.empty()) throw Error(error);
  broadcast(crcs);
  return crcs;
}

void ShardGroup::broadcast(std::vector<uint32_t>& values) const {
  if (comm_ == MPI_COMM_NULL) return;
  int64_t n = static_cast<int64_t>(values.size());
  mpi_ok(MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm_), "broadcast");
  values.resize(static_cast<size_t>(n));
  mpi_ok(MPI_Bcast(values.data(), static_cast<int>(n), MPI_UINT32_T, 0, comm_), "broadcast");
}

void ShardGroup::broadcast(std::string& text) const {
  if (comm_ != MPI_COMM_NULL) broadcast_text(comm_, text, 0);
}

}  // namespace megatrain::ckpt
