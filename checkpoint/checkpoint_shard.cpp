// Hyperslab boxes of a flat range, CRC pieces and the MPI agreement of sharded checkpoint I/O
// (see checkpoint_shard.h for the invariants).
#include "checkpoint/checkpoint_shard.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>

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

uint32_t crc_floats(const float* data, int64_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(data);
  for (int64_t left = n * 4; left > 0;) {
    const uInt chunk = static_cast<uInt>(std::min<int64_t>(left, 1 << 30));
    crc = crc32(crc, bytes, chunk);
    bytes += chunk;
    left -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

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
  throw InputError(text);
}

void ShardGroup::check_partitions(int64_t begin, int64_t end, bool slices_hold, int64_t total) const {
  const int64_t mine[3] = {begin, end, slices_hold ? 1 : 0};
  std::vector<int64_t> all(3 * static_cast<size_t>(size_));
  if (comm_ == MPI_COMM_NULL) std::copy(mine, mine + 3, all.begin());
  else mpi_ok(MPI_Allgather(mine, 3, MPI_INT64_T, all.data(), 3, MPI_INT64_T, comm_), "allgather");
  int64_t next = 0;
  std::string parts;
  bool ok = true;
  for (size_t r = 0; r < static_cast<size_t>(size_); ++r) {
    ok = ok && all[3 * r] == next && all[3 * r + 1] >= next && all[3 * r + 2] == 1;
    next = all[3 * r + 1];
    parts += fmt::format(" [{}, {}){}", all[3 * r], all[3 * r + 1], all[3 * r + 2] == 1 ? "" : " (slices miss it)");
  }
  MT_CHECK(ok && next == total,
           "checkpoint: the ranks' partitions must tile [0, {}) in rank order, each inside that rank's slices; "
           "got{}",
           total, parts);
}

std::vector<uint32_t> ShardGroup::combine_on_root(const std::vector<CrcPiece>& mine, size_t datasets) const {
  std::vector<int64_t> flat;
  for (const CrcPiece& p : mine) flat.insert(flat.end(), {p.dataset, p.bytes, static_cast<int64_t>(p.crc)});
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
  if (rank_ != 0) return {};
  // crc32_combine(0, c, n) = c: the CRC of nothing followed by a piece is the piece's CRC.
  std::vector<uint32_t> crcs(datasets, 0);
  for (size_t i = 0; i + 2 < all.size(); i += 3) {
    uint32_t& crc = crcs.at(static_cast<size_t>(all[i]));
    crc = static_cast<uint32_t>(crc32_combine(crc, static_cast<uLong>(all[i + 2]), static_cast<z_off_t>(all[i + 1])));
  }
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
