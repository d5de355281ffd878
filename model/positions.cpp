#include "model/positions.h"

#include <algorithm>

#include "kernels/check.h"

namespace megatrain {

RowPositions RowPositions::identity(int B, int T, int first_position) {
  RowPositions p;
  p.local_len_ = T;
  p.seq_len_ = first_position + T;
  for (int b = 0; b < B; ++b) p.runs_.push_back({int64_t{b} * T, T, first_position});
  return p;
}

RowPositions RowPositions::of_split(const CpSplit& split, int B) {
  RowPositions p;
  p.local_len_ = split.local_len();
  p.seq_len_ = split.seq_len;
  p.rows_before_ = int64_t{split.rank} * split.local_len();
  for_each_position_run(split, 0, int64_t{B} * split.local_len(), [&](int64_t first, int64_t count, int position) {
    p.runs_.push_back({first, count, position});
  });
  return p;
}

RowPositions RowPositions::restarted(const RowPositions& base, const int32_t* starts) {
  RowPositions p = base;
  p.runs_.clear();
  for (const Run& r : base.runs_) {  // runs end where sequences do: the run's sequence is its first row's
    const int32_t* s = starts + r.first / base.local_len_ * base.seq_len_;
    int64_t first = r.first;
    for (int64_t i = 1; i <= r.count; ++i) {
      const int at = r.position + static_cast<int>(i);
      if (i < r.count && s[at] != at) continue;  // the next row stays in the document
      const int from = r.position + static_cast<int>(first - r.first);
      p.runs_.push_back({first, r.first + i - first, from - s[from]});
      first = r.first + i;
    }
  }
  return p;
}

void RowPositions::for_each_run(int64_t first_row, int64_t rows,
                                const std::function<void(int64_t, int64_t, int)>& f) const {
  const int64_t end = first_row + rows;
  for (const Run& r : runs_) {
    const int64_t a = std::max(first_row, r.first), b = std::min(end, r.first + r.count);
    if (a < b) f(a - first_row, b - a, r.position + static_cast<int>(a - r.first));
  }
}

void rope_at(const Stream& s, Tensor qkv, const RowPositions& positions, int n_heads, int n_kv_heads,
             const RopeFrequencies& freq, RopeDirection dir) {
  const int64_t rows = qkv.shape[0] * qkv.shape[1], w = qkv.numel() / rows;
  MT_CHECK(qkv.shape[1] == positions.local_len(), "RoPE over sequences of {} rows, the positions are for {}",
           qkv.shape[1], positions.local_len());
  struct Batch {
    int64_t first = 0, count = 0, sequences = 0;
    int position = 0;
  } batch;
  const auto flush = [&] {
    if (batch.sequences > 0)
      rope_apply(s, qkv.part(batch.first * w, Shape{batch.sequences, batch.count, w}), n_heads, n_kv_heads, freq, dir,
                 batch.position);
  };
  positions.for_each_run(0, rows, [&](int64_t first, int64_t count, int position) {
    const bool extends = batch.sequences > 0 && count == batch.count && count == positions.local_len() &&
                         position == batch.position && first == batch.first + batch.sequences * batch.count;
    if (extends) return static_cast<void>(++batch.sequences);
    flush();
    batch = {first, count, 1, position};
  });
  flush();
}

}  // namespace megatrain
