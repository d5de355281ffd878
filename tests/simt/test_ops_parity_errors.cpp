// The device checks of the ops.h dispatch and the device backend's memory primitives: a tensor of
// one device given to a stream of the other is a clear error naming the op, the argument and both
// devices (never a CPU kernel reading device memory or the reverse); an op without a CUDA kernel
// says so rather than falling back to the CPU; bf16 activations are refused on a CUDA stream;
// allocate / copies / memset round-trip and are accounted; and with no backend at all, the error
// names the fix.
#include <gtest/gtest.h>

#include <string>

#include "kernels/ops.h"
#include "tests/simt/twin.h"

namespace megatrain::test {
namespace {

template <class F>
void expect_error(F f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const char* part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_F(OpsParity, CudaTensorsOnACpuStreamAreAnError) {
  Twin x = f32({8}, 1), out = f32({8}, 2);
  expect_error([&] { gelu_forward(Stream::cpu(), out(Side::cuda), x(Side::cuda)); },
               {"gelu_forward", "argument 1", "CUDA memory", "stream runs on CPU"});
  // One argument on the wrong device is enough.
  expect_error([&] { add_forward(Stream::cpu(), out(Side::cpu), x(Side::cpu), x(Side::cuda)); },
               {"add_forward", "argument 3", "CUDA memory"});
  EXPECT_EQ(out.values<float>(Side::cpu), std::vector<float>(randn(8, 2))) << "nothing was written";
}

TEST_F(OpsParity, CpuTensorsOnACudaStreamAreAnError) {
  Twin inp = f32({2, 4}, 3), w = f32({3, 4}, 4), out = f32({2, 3}, 5);
  expect_error([&] { matmul_forward(cuda_stream(), out(Side::cuda), inp(Side::cpu), w(Side::cuda), Tensor{}); },
               {"matmul_forward", "argument 2", "CPU memory", "stream runs on CUDA"});
  expect_error([&] { sum_squares(cuda_stream(), inp(Side::cpu)); }, {"sum_squares", "CPU memory"});
}

// bf16 activations are for CPU streams ([Note: bf16 activations] in kernels/ops.h).
TEST_F(OpsParity, Bf16ActivationsOnACudaStreamAreAnError) {
  const Stream bf16_stream{Device::cuda, nullptr, Precision::bf16};
  Twin x(*backend_, bf16_stream, {2, 4}, DType::bf16, std::vector<uint16_t>(8, 0x3f80));
  Twin y(*backend_, bf16_stream, {2, 4}, DType::bf16, std::vector<uint16_t>(8));
  Twin w = f32({3, 4}, 12), out = f32({2, 3}, 13);
  expect_error([&] { gelu_forward(bf16_stream, y(Side::cuda), x(Side::cuda)); }, {"inp is bf16 on a CUDA stream"});
  expect_error([&] { matmul_forward(bf16_stream, out(Side::cuda), x(Side::cuda), w(Side::cuda), Tensor{}); },
               {"inp is bf16 on a CUDA stream"});
}

TEST_F(OpsParity, DecodingAttentionHasNoCudaKernel) {
  Twin q = f32({1, 8}, 6), k = f32({4, 8}, 7), v = f32({4, 8}, 8), out = f32({1, 8}, 9);
  const auto decode = [&] {
    attention_decode_forward(cuda_stream(), out(Side::cuda), q(Side::cuda), k(Side::cuda), v(Side::cuda), 1, 1, 2);
  };
  expect_error(decode, {"attention_decode_forward has no CUDA kernel", "CPU stream"});
}

TEST_F(OpsParity, GemmQueriesReachTheBackend) {
  EXPECT_EQ(matmul_path(cuda_stream()), "the CPU GEMM (cuBLASLt is not emulated)");
  EXPECT_EQ(matmul_path(Stream::cpu()), "the float32 GEMM");
  // The emulated backend's GEMMs are the CPU's, so it holds what the CPU GEMM holds.
  EXPECT_EQ(matmul_scratch_bytes(cuda_stream()), matmul_scratch_bytes(Stream::cpu()));
}

TEST_F(OpsParity, MemoryPrimitivesRoundTripAndAreAccounted) {
  DeviceBackend& b = *backend_;
  const Stream s = cuda_stream();
  const std::vector<float> v = randn(1000, 10);
  EXPECT_EQ(b.memory_stats().allocated, 0);
  auto* x = static_cast<float*>(b.allocate(s, v.size() * sizeof(float)));
  auto* y = static_cast<float*>(b.allocate(s, v.size() * sizeof(float)));
  // Each request rounds up to the allocator's 512 bytes: 4000 → 4096.
  EXPECT_EQ(b.memory_stats().allocated, 2 * 4096);
  EXPECT_EQ(b.allocate(s, 0), nullptr);
  b.copy_to_device(s, x, v.data(), v.size() * sizeof(float));
  b.copy_on_device(s, y, x, v.size() * sizeof(float));
  b.memset(s, x + 10, 0, 20 * sizeof(float));
  b.synchronize(s);
  std::vector<float> got_x(v.size()), got_y(v.size());
  b.copy_to_host(s, got_x.data(), x, v.size() * sizeof(float));
  b.copy_to_host(s, got_y.data(), y, v.size() * sizeof(float));
  EXPECT_EQ(got_y, v);
  std::vector<float> want_x = v;
  std::fill(want_x.begin() + 10, want_x.begin() + 30, 0.0f);
  EXPECT_EQ(got_x, want_x);
  b.deallocate(x);
  b.deallocate(y);
  b.deallocate(nullptr);
  EXPECT_EQ(b.memory_stats().allocated, 0);
}

TEST_F(OpsParity, NoBackendIsAnErrorNamingTheFix) {
#ifdef MEGATRAIN_HAS_CUDA
  GTEST_SKIP() << "this build has the CUDA backend: with no backend set it would make the production one, "
                  "which needs the CUDA runtime (not called by tests on machines without a GPU)";
#else
  set_cuda_backend(nullptr);
  Twin x = f32({8}, 11);
  expect_error([&] { scale_inplace(cuda_stream(), x(Side::cuda), 2.0f); },
               {"this build has no CUDA backend", "-DMEGATRAIN_CUDA=ON"});
#endif
}

}  // namespace
}  // namespace megatrain::test
