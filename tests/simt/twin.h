// One op argument on both devices: the same values in a host buffer (a Device::cpu tensor) and
// in memory from the device backend (a Device::cuda tensor), for running an op of kernels/ops.h
// once on each and comparing what each side wrote. OpsParity sets the test binary's device backend
// (test_backend.h: the emulation, or a GPU's) for the duration of each test.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cuda/backend.h"
#include "tests/simt/against_cpu.h"
#include "tests/simt/test_backend.h"

namespace megatrain::test {

enum class Side { cpu, cuda };

class Twin {
 public:
  // Values of dtype `dtype` (f32, i32, or 16-bit bits), shape.numel() of them.
  template <class T>
  Twin(DeviceBackend& backend, const Stream& s, Shape shape, DType dtype, const std::vector<T>& values)
      : backend_(backend), stream_(s), shape_(shape), dtype_(dtype), host_(values.size() * sizeof(T)) {
    EXPECT_EQ(host_.size(), static_cast<size_t>(shape.numel()) * dtype_size(dtype)) << "twin of the wrong size";
    std::memcpy(host_.data(), values.data(), host_.size());
    device_ = backend.allocate(s, host_.size());
    backend.copy_to_device(s, device_, host_.data(), host_.size());
  }
  ~Twin() { backend_.deallocate(device_); }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;

  Tensor operator()(Side side) {
    Tensor t;
    t.data = side == Side::cpu ? static_cast<void*>(host_.data()) : device_;
    t.dtype = dtype_;
    t.shape = shape_;
    t.device = side == Side::cpu ? Device::cpu : Device::cuda;
    return t;
  }
  template <class T>
  std::vector<T> values(Side side) const {
    std::vector<T> out(host_.size() / sizeof(T));
    if (side == Side::cpu)
      std::memcpy(out.data(), host_.data(), host_.size());
    else
      backend_.copy_to_host(stream_, out.data(), device_, host_.size());
    return out;
  }

 private:
  DeviceBackend& backend_;
  Stream stream_;
  Shape shape_;
  DType dtype_;
  std::vector<unsigned char> host_;
  void* device_ = nullptr;
};

class OpsParity : public ::testing::Test {
 protected:
  void SetUp() override { set_cuda_backend(backend_.get()); }
  void TearDown() override { set_cuda_backend(nullptr); }

  // Runs op(stream, side) on a CPU stream with the CPU side of the twins, then on a CUDA stream
  // with their CUDA side.
  template <class Op>
  void both(Op op, Precision matmul = Precision::fp32) {
    op(Stream::cpu(matmul), Side::cpu);
    op(Stream{Device::cuda, nullptr, matmul}, Side::cuda);
  }
  Twin f32(Shape shape, uint32_t seed, float scale = 1.0f) {
    return Twin(*backend_, cuda_stream(), shape, DType::f32, randn(static_cast<size_t>(shape.numel()), seed, scale));
  }
  Twin i32(Shape shape, const std::vector<int32_t>& values) {
    return Twin(*backend_, cuda_stream(), shape, DType::i32, values);
  }
  static Stream cuda_stream() { return Stream{Device::cuda, nullptr, Precision::fp32}; }

  // The CUDA side against the CPU side: within against_cpu.h's tolerance, or bitwise.
  static void expect_close(const Twin& t, const char* what) {
    expect_matches_cpu(t.values<float>(Side::cuda), t.values<float>(Side::cpu), what);
  }
  static void expect_bitwise(const Twin& t, const char* what) {
    EXPECT_EQ(t.values<unsigned char>(Side::cuda), t.values<unsigned char>(Side::cpu)) << what;
  }

  std::unique_ptr<DeviceBackend> backend_ = make_test_backend();
};

}  // namespace megatrain::test
