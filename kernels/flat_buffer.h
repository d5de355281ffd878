// FlatBuffer: one flat, 64-byte aligned, zero-initialised float buffer that owns its memory —
// the storage of every kind of per-parameter state (parameters, gradients, optimizer moments,
// shards and communication buffers). Movable, not copyable.
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace megatrain {

// One flat, 64-byte aligned, zero-initialised float buffer.
class FlatBuffer {
 public:
  FlatBuffer() = default;
  explicit FlatBuffer(int64_t n) : arena_(static_cast<size_t>(n) * 4), data_(arena_.alloc_f32(n)), n_(n) {}
  float* data() const { return data_; }
  int64_t size() const { return n_; }
  Tensor all() const { return Tensor(data_, Shape{n_}); }

 private:
  Arena arena_;
  float* data_ = nullptr;
  int64_t n_ = 0;
};

}  // namespace megatrain
