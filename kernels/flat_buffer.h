// FlatBuffer: one flat, 64-byte aligned, zero-initialised float buffer that owns its memory —
// the storage of every kind of per-parameter state (parameters, gradients, optimizer moments,
// shards and communication buffers) — in host memory, or in the memory of a stream's device.
// HalfBuffer: the same for 16-bit floats (bf16 or fp16 bits), what mixed precision keeps of the
// parameters and reduces gradients in. Movable, not copyable.
#pragma once
#include <cstdint>

#include "kernels/device.h"
#include "kernels/tensor.h"

namespace megatrain {

// One flat, 64-byte aligned, zero-initialised float buffer.
class FlatBuffer {
 public:
  FlatBuffer() = default;
  explicit FlatBuffer(int64_t n) : arena_(static_cast<size_t>(n) * 4), data_(arena_.alloc_f32(n)), n_(n) {}
  FlatBuffer(int64_t n, const Stream& s) : arena_(static_cast<size_t>(n) * 4, s), data_(arena_.alloc_f32(n)), n_(n) {}
  float* data() const { return data_; }
  int64_t size() const { return n_; }
  Device device() const { return arena_.device(); }
  // Elements [first, first + n) as a 1-D tensor of the buffer's device.
  Tensor part(int64_t first, int64_t n) const { return Tensor(data_ + first, Shape{n}).on(device()); }

 private:
  Arena arena_;
  float* data_ = nullptr;
  int64_t n_ = 0;
};

// One flat, 64-byte aligned, zero-initialised buffer of n 16-bit floats of precision `p`.
class HalfBuffer {
 public:
  HalfBuffer() = default;
  HalfBuffer(int64_t n, Precision p, const Stream& s)
      : arena_(static_cast<size_t>(n) * 2, s), data_(arena_.alloc_u16(n)), n_(n), precision_(p) {}
  uint16_t* data() const { return data_; }
  int64_t size() const { return n_; }
  // Elements [first, first + n) as a 1-D tensor of the buffer's dtype and device.
  Tensor part(int64_t first, int64_t n) const {
    return Tensor(data_ + first, Shape{n}, dtype_of(precision_)).on(arena_.device());
  }

 private:
  Arena arena_;
  uint16_t* data_ = nullptr;
  int64_t n_ = 0;
  Precision precision_ = Precision::bf16;
};

}  // namespace megatrain
