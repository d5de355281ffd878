// What the dispatch files (ops.cpp, ops_vocab.cpp, ops_elementwise.cpp) share: the shape and
// dtype checks, and the choice of backend by the stream's device. Internal to kernels/.
#pragma once
#include <initializer_list>

#include "kernels/cuda/backend.h"
#include "kernels/ops.h"

namespace megatrain::dispatch {

inline bool present(const Tensor& t) { return t.data != nullptr; }

inline void expect_f32(const Tensor& t, const char* name, int64_t numel) {
  MT_CHECK(t.dtype == DType::f32, "{} must be f32, got {}", name, dtype_name(t.dtype));
  MT_CHECK(t.numel() == numel, "{} has shape {} ({} elements), expected {} elements", name, t.shape.str(),
           t.numel(), numel);
}

// The tensor's data, or nullptr when it is absent (empty).
inline float* opt(const Tensor& t, const char* name, int64_t numel) {
  if (!present(t)) return nullptr;
  expect_f32(t, name, numel);
  return t.f32();
}

inline int64_t rows(const Tensor& t) { return t.numel() / t.shape[t.shape.ndim - 1]; }
inline int last(const Tensor& t) { return static_cast<int>(t.shape[t.shape.ndim - 1]); }

inline const char* device_name(Device d) { return d == Device::cpu ? "CPU" : "CUDA"; }

// Checks that every present tensor lives on the stream's device; then the device backend for a
// CUDA stream (kernels/cuda/backend.h), or nullptr for a CPU stream (the cpu:: kernels).
inline DeviceBackend* backend_for(const Stream& s, const char* op, std::initializer_list<Tensor> tensors) {
  int i = 0;
  for (const Tensor& t : tensors) {
    ++i;
    MT_CHECK(!present(t) || t.device == s.device,
             "{}: its tensor argument {} ({}) is in {} memory but the stream runs on {} (give an op tensors of its "
             "stream's device: copy them over first)",
             op, i, t.shape.str(), device_name(t.device), device_name(s.device));
  }
  return s.device == Device::cuda ? &cuda_backend() : nullptr;
}

}  // namespace megatrain::dispatch
