// Where each row a stage holds sits in its sequence: the map that RoPE, the learned position
// embedding and the dropout keys read. Rows are B sequences of local_len() rows back to back; with
// the whole sequence on the rank (identity) row t of a sequence is at position t, under context
// parallelism at the split's position (parallel/context_parallel.h: two chunks of each sequence).
// Kept as runs of consecutive rows at consecutive positions, so a kernel runs once per run.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/ops.h"
#include "parallel/context_parallel.h"

namespace megatrain {

class RowPositions {
 public:
  // B sequences of T rows at positions first_position, first_position + 1, … (the KV-cached decoder
  // runs one sequence from its cache's length on).
  static RowPositions identity(int B, int T, int first_position = 0);
  // B sequences of split.local_len() rows: this cp rank's chunks.
  static RowPositions of_split(const CpSplit& split, int B);
  // `base`'s rows with positions restarting at each document (data.reset_position_ids, Megatron's
  // semantics): position p of sequence b becomes p − starts[b·seq_len + p], starts (B, seq_len) being
  // each position's document's first position. Runs break where documents start.
  static RowPositions restarted(const RowPositions& base, const int32_t* starts);

  int local_len() const { return local_len_; }
  // T of the whole sequence: the rows of the position table in use.
  int seq_len() const { return seq_len_; }
  // Rows of each sample that other ranks hold before this rank's, in the single process's order
  // (cp rank · local_len): dropout keys this rank's rows as if they followed them.
  int64_t rows_before() const { return rows_before_; }
  // f(first, count, position) for each run within rows [first_row, first_row + rows) — row
  // first_row + first + i at position + i — in order; runs break where a sequence or a chunk ends.
  void for_each_run(int64_t first_row, int64_t rows,
                    const std::function<void(int64_t first, int64_t count, int position)>& f) const;

 private:
  struct Run {
    int64_t first, count;
    int position;
  };
  std::vector<Run> runs_;  // over all rows, in order
  int local_len_ = 0, seq_len_ = 0;
  int64_t rows_before_ = 0;
};

// RoPE on qkv (B, local_len, (H + 2·Hkv)·D) at the rows' positions (or its inverse on a gradient);
// runs of the same length and position in consecutive sequences go to the kernel as one batch.
void rope_at(const Stream& s, Tensor qkv, const RowPositions& positions, int n_heads, int n_kv_heads,
             const RopeFrequencies& freq, RopeDirection dir);

}  // namespace megatrain
