// What the dispatch files (ops.cpp, ops_vocab.cpp, ops_elementwise.cpp) share: the shape and
// dtype checks, and the choice of backend by the stream's device. Internal to kernels/.
#pragma once
#include <initializer_list>

#include "kernels/cpu/bf16.h"
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

// An activation: f32, or bf16 on a CPU stream ([Note: bf16 activations] in kernels/ops.h).
inline void expect_activation(const Stream& s, const Tensor& t, const char* name, int64_t numel) {
  MT_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, "{} must be f32 or bf16, got {}", name,
           dtype_name(t.dtype));
  MT_CHECK(t.dtype == DType::f32 || s.device == Device::cpu,
           "{} is bf16 on a CUDA stream: the device kernels read and write float32 activations", name);
  MT_CHECK(t.numel() == numel, "{} has shape {} ({} elements), expected {} elements", name, t.shape.str(),
           t.numel(), numel);
}

// Two activations of one op that must share a dtype (an output and the input it is computed from).
inline void expect_same_dtype(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  MT_CHECK(a.dtype == b.dtype, "{} is {} but {} is {}: give both the same dtype", a_name, dtype_name(a.dtype), b_name,
           dtype_name(b.dtype));
}

inline cpu::bf16* bf16_data(const Tensor& t) { return reinterpret_cast<cpu::bf16*>(t.half()); }

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
