// The shape of one tensor-parallel rank, without its communicator: which of `size` ranks it is,
// whether sequence parallelism shards the rows outside the tp regions, and the boundary
// activations' global shape (rows × width, (N, C)). What planning a stage's activations reads
// (model/stage_plan.h) — the planner builds it from a config alone; a TensorParallel
// (parallel/mappings.h) is one with its group.
#pragma once
#include <cstdint>

namespace megatrain {

struct TpOptions {
  bool sequence_parallel = false;
  // Column-parallel backward computes the weight gradient while its input gradient is reduced
  // (model/linear.h); off: the reduction is waited for first (to measure what overlap hides).
  bool overlap = true;
};

class TpShape {
 public:
  // tp = 1: every row, rows × width.
  TpShape(int64_t rows, int64_t width) : rows_(rows), width_(width) {}
  // Rank `rank` of `size`; sequence parallelism needs `size` to divide the rows.
  TpShape(int rank, int size, const TpOptions& options, int64_t rows, int64_t width);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  bool overlap() const { return overlap_; }
  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }
  int64_t local_rows() const { return sequence_parallel_ ? rows_ / size_ : rows_; }
  int64_t first_row() const { return sequence_parallel_ ? rank_ * local_rows() : 0; }

 private:
  bool sequence_parallel_ = false, overlap_ = true;
  int rank_ = 0, size_ = 1;
  int64_t rows_ = 0, width_ = 0;
};

}  // namespace megatrain
