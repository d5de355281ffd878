// Compressed gradient reduction for data parallelism (ZeRO stage 0): instead of all-reducing a
// bucket's float32 gradients, each rank sends a compressed form and receives an estimate of their
// sum over the ranks. The compression error is fed back: what a rank's gradient lost this step is
// added to its next one (error feedback), so nothing is dropped, only delayed.
//   powersgd  (Vogels et al. 2019) every 2-D tensor M (rows × cols) of a bucket with
//             min(rows, cols) > r goes as a rank-r product: P = M·Q is all-reduced and
//             orthonormalised, Q = Mᵀ·P all-reduced, and the estimate of ΣM is P·Qᵀ. Q starts
//             from the same random matrix on every rank and is reused as the next step's start
//             (warm start: one power iteration per step). The rest of the bucket (vectors, small
//             matrices) is all-reduced exactly. Floats sent per tensor: r·(rows + cols) instead of
//             rows·cols.
//   onebit    (signSGD with error feedback, the 1-bit Adam family): the bucket, in blocks of
//             kOneBitBlock values, goes as one sign bit per value and one float32 scale per block
//             (the block's mean |value|); every rank gathers every rank's bits and scales and sums
//             scale·sign in rank order. Bytes sent per rank: n/8 + 4·n/kOneBitBlock instead of 4·n.
// Error feedback: with e the rank's carried error and g its gradient, c = g + e is what is
// compressed, the estimate S of Σc over ranks replaces g, and e becomes c − S/p for PowerSGD (the
// rank's share of the approximation, as PyTorch's PowerSGD hook) and c − scale·sign(c) for onebit.
// Both are deterministic (the same on every rank, run to run). The error and Q are state kept
// across steps but not in checkpoints: a resumed compressed run restarts them at zero and at the
// seeded Q, so it is not bitwise equal to an uninterrupted one.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/comm.h"
#include "parallel/flat_range.h"

namespace megatrain {

enum class GradCompression : uint8_t { none, powersgd, onebit };
const char* grad_compression_name(GradCompression c);

constexpr int64_t kOneBitBlock = 2048;

// A 2-D tensor of the flat layout: rows × cols floats from `offset`.
struct MatrixSpan {
  int64_t offset = 0, rows = 0, cols = 0;
};

class GradCompressor {
 public:
  virtual ~GradCompressor() = default;
  // g: this rank's gradients of flat range r (r.size() floats); replaced by the estimate of their
  // sum over the ranks of the communicator. Collective and blocking: every rank calls it for the
  // same ranges in the same order.
  virtual void reduce(float* g, FlatRange r) = 0;
  // This rank's error carried into the next step for the floats of range r (zero where none).
  virtual std::vector<float> error(FlatRange r) const = 0;
  // Bytes of state kept across steps (the error feedback, PowerSGD's Q), for the memory accounting.
  virtual int64_t state_bytes() const = 0;
};

// `matrices`: every 2-D tensor of the layout (PowerSGD compresses those that lie inside a reduced
// range); `rank`: PowerSGD's r; `seed`: Q's start.
std::unique_ptr<GradCompressor> make_grad_compressor(GradCompression method, const Comm& comm,
                                                     std::vector<MatrixSpan> matrices, int rank, uint64_t seed);

}  // namespace megatrain
