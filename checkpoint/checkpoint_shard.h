// The pieces a sharded checkpoint read or write is made of (internal to checkpoint/: the file's
// sharded I/O and the folder's shared CRC; the trainer broadcasts its load list with ShardGroup):
// where a rank's local elements sit in the stored global tensors (runs, and the hyperslab boxes of
// them), per-piece CRC-32s, and ShardGroup, the MPI glue that makes the ranks act as one.
// Invariants: runs are in increasing local and global order (a tensor-parallel slice keeps the order
// of its rows and columns), so a contiguous local buffer matches the row-major traversal of its
// boxes; the pieces of all ranks, sorted by position, must tile every stored tensor exactly, and
// their CRCs combined in that order equal the CRC of the whole tensor; every ShardGroup method is
// collective, and agree() turns an error on any rank into the same InputError on every rank (an
// MPI_Allreduce first, so no rank is left waiting).
#pragma once
#include <mpi.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "model/params.h"

namespace megatrain::ckpt {

// The elements start[d] ≤ i[d] < start[d] + count[d] of a tensor, in every dimension d < ndim.
struct Box {
  std::array<int64_t, Shape::kMaxDims> start{}, count{};
};

// The flat (row-major) elements [lo, hi) of a tensor of `shape` as disjoint boxes in increasing
// order: at most 2·ndim − 1 (for a matrix: a partial first row, whole rows, a partial last row).
std::vector<Box> range_boxes(const Shape& shape, int64_t lo, int64_t hi);

// Local elements [local, local + n) of a tensor are elements [global, global + n), row-major, of
// the stored (global) tensor.
struct Run {
  int64_t local = 0, global = 0, n = 0;
};

// The runs of local elements [lo, hi) of tensor i of `layout`, in increasing order and merged where
// contiguous on both sides, leaving out global elements ≥ `stored` (the stored tensor's size: rows
// beyond it are vocabulary padding that only a larger tp has).
std::vector<Run> stored_runs(const ParamLayout& layout, size_t i, int64_t lo, int64_t hi, int64_t stored);

// The boxes of `runs` in a stored tensor of `shape`, in order, neighbours with the same extent in
// every dimension but the first merged (a column slice is one box, not one per row).
std::vector<Box> run_boxes(const Shape& shape, const std::vector<Run>& runs);

// zlib CRC-32 of the bytes of n floats.
uint32_t crc_floats(const float* data, int64_t n);

// What one rank contributes to the checksum of dataset `dataset`: the CRC of `bytes` bytes at byte
// `offset`.
struct CrcPiece {
  int64_t dataset = 0, offset = 0, bytes = 0;
  uint32_t crc = 0;
};

// The ranks of one checkpoint read or write. MPI_COMM_NULL means this process alone (no MPI calls,
// MPI need not be initialised).
class ShardGroup {
 public:
  explicit ShardGroup(MPI_Comm comm);
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Throws on every rank the InputError of the lowest rank whose `error` is not empty.
  void agree(const std::string& error) const;
  // The same for a misuse of the API (an Error: a bug, not bad input).
  void agree_misuse(const std::string& error) const;
  // On every rank: the CRC of each dataset d of dataset_bytes[d] bytes, combined from every rank's
  // pieces sorted by position. Pieces that do not tile a dataset exactly (a gap or an overlap: some
  // bytes written twice or never) are an Error on every rank, naming `names[d]`.
  std::vector<uint32_t> combine(const std::vector<CrcPiece>& mine, const std::vector<int64_t>& dataset_bytes,
                                const std::vector<std::string>& names) const;
  // Rank 0's value, on every rank.
  void broadcast(std::vector<uint32_t>& values) const;
  void broadcast(std::string& text) const;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace megatrain::ckpt
