// Tensor-parallel regions (Megatron-LM's mappings): the collectives that enter and leave a region in
// which each tp rank holds a slice of the hidden dimension (its attention heads, MLP units or
// vocabulary rows), each forward collective written next to its backward conjugate.
//
// Activations crossing a region boundary are (N, C) rows. Outside tp regions every rank holds all N
// rows, or, with sequence parallelism, one of tp equal row shards (rank r: rows
// [r·N/tp, (r+1)·N/tp)), so norms, dropout and residual adds run on N/tp rows.
//
//                          forward                          backward
//   enter (column input)   identity     | all-gather        all-reduce     | reduce-scatter
//   leave (row output)     all-reduce   | reduce-scatter    identity       | all-gather
//                          (no SP)        (SP)              (no SP)          (SP)
//
// Without sequence parallelism the local and full tensors of enter/leave are one buffer (the
// collective is in place or absent). With tp = 1 every mapping does nothing.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/tensor.h"
#include "parallel/comm.h"
#include "parallel/tp_shape.h"

namespace megatrain {

// A tp rank's shape (parallel/tp_shape.h) with its group: the collectives below.
class TensorParallel : public TpShape {
 public:
  // tp = 1, no communicator; rows × width as below.
  TensorParallel(int64_t rows, int64_t width) : TpShape(rows, width) {}
  // `tp`: the tensor-parallel group; rows × width: the boundary activations' global shape (N, C).
  TensorParallel(const Comm& tp, const TpOptions& options, int64_t rows, int64_t width);

  // The communicator (only when size() > 1).
  const Comm& comm() const;

  // full (N, C) ← local (local_rows, C), one dtype: f32, or a 16-bit activation's (gathered as bits).
  void enter_forward(Tensor full, Tensor local) const;
  // dlocal ← Σ over tp of dfull, asynchronously: wait() before reading dlocal, and compute the
  // weight gradient meanwhile (the overlap of Megatron's async grad all-reduce).
  Work enter_backward(Tensor dlocal, Tensor dfull) const;
  // local ← Σ over tp of partial (N, C).
  void leave_forward(Tensor local, Tensor partial) const;
  // dfull (N, C) ← dlocal.
  void leave_backward(Tensor dfull, Tensor dlocal) const;

 private:
  void check(const Tensor& full, const Tensor& local, const char* what) const;

  std::optional<Comm> comm_;
  std::vector<int64_t> counts_;  // floats of each rank's row shard
};

}  // namespace megatrain
