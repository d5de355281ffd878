// The pieces a sharded checkpoint read or write is made of (internal to checkpoint/checkpoint_file.cpp):
// the hyperslab boxes of a contiguous element range, per-piece CRC-32s, and ShardGroup, the MPI glue
// that makes the ranks act as one. Invariants: the boxes of a range, traversed in row-major order,
// are exactly that range; CRC pieces of consecutive ranges combined in rank order equal the CRC of
// the whole; every ShardGroup method is collective, and agree() turns an error on any rank into the
// same InputError on every rank (an MPI_Allreduce first, so no rank is left waiting).
#pragma once
#include <mpi.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace megatrain::ckpt {

// The elements start[d] ≤ i[d] < start[d] + count[d] of a tensor, in every dimension d < ndim.
struct Box {
  std::array<int64_t, Shape::kMaxDims> start{}, count{};
};

// The flat (row-major) elements [lo, hi) of a tensor of `shape` as disjoint boxes in increasing
// order: at most 2·ndim − 1 (for a matrix: a partial first row, whole rows, a partial last row).
std::vector<Box> range_boxes(const Shape& shape, int64_t lo, int64_t hi);

// zlib CRC-32 of the bytes of n floats.
uint32_t crc_floats(const float* data, int64_t n);

// What one rank contributes to the checksum of dataset `dataset`: the CRC of a contiguous piece.
struct CrcPiece {
  int64_t dataset = 0, bytes = 0;
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
  // Checks on every rank that the ranks' [begin, end) tile [0, total) in rank order and that each
  // rank's slices hold its partition (`slices_hold`); a misuse is an Error on every rank.
  void check_partitions(int64_t begin, int64_t end, bool slices_hold, int64_t total) const;
  // Rank 0: the CRC of each of `datasets` datasets, combined from every rank's pieces in rank order
  // (each rank lists its pieces by increasing dataset). Other ranks: empty.
  std::vector<uint32_t> combine_on_root(const std::vector<CrcPiece>& mine, size_t datasets) const;
  // Rank 0's value, on every rank.
  void broadcast(std::vector<uint32_t>& values) const;
  void broadcast(std::string& text) const;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace megatrain::ckpt
