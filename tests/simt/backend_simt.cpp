// The emulated DeviceBackend (backend_simt.h).
#include "tests/simt/simt.h"
// After the emulation: the kernel backend's declarations in namespace cuda_simt.
#include "tests/simt/backend_simt.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu.h"
#include "kernels/cuda/kernel_backend.h"

namespace megatrain::test {
namespace {

// Host memory as the device allocator. New segments are filled with 0xFF bytes (NaN as float), as
// the emulation fills shared memory, so a kernel reading scratch it never wrote shows up.
cuda::RawAllocator host_allocator() {
  cuda::RawAllocator raw;
  raw.malloc = [](size_t bytes) -> void* {
    void* p = std::aligned_alloc(cuda::CachingAllocator::kRound, cuda::CachingAllocator::round_size(bytes));
    if (p != nullptr) std::memset(p, 0xFF, bytes);
    return p;
  };
  raw.free = [](void* p) { std::free(p); };
  return raw;
}

class SimtBackend final : public cuda_simt::KernelBackend {
 public:
  SimtBackend() : memory_(host_allocator()) {}

  void* allocate(const Stream& s, size_t bytes) override { return memory_.allocate(bytes, s.handle); }
  void deallocate(void* ptr) override { memory_.deallocate(ptr); }
  void copy_to_device(const Stream&, void* dst, const void* host_src, size_t bytes) override {
    std::memcpy(dst, host_src, bytes);
  }
  void copy_to_host(const Stream&, void* host_dst, const void* src, size_t bytes) override {
    std::memcpy(host_dst, src, bytes);
  }
  void copy_on_device(const Stream&, void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  void memset(const Stream&, void* dst, int byte, size_t bytes) override { std::memset(dst, byte, bytes); }
  void synchronize(const Stream&) override {}  // every emulated launch has finished when it returns
  cuda::AllocatorStats memory_stats() const override { return memory_.stats(); }
  bool host_addressable() const override { return true; }

  void matmul_forward(const Stream& s, float* out, const float* inp, const float* weight, const float* bias,
                      int64_t N, int C, int OC) override {
    cpu::matmul_forward(out, DType::f32, {inp, DType::f32}, {weight, DType::f32}, bias, N, C, OC, s.matmul);
  }
  void matmul_backward(const Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int64_t N, int C, int OC) override {
    cpu::matmul_backward(dinp, dweight, dbias, {dout, DType::f32}, {inp, DType::f32}, {weight, DType::f32}, N, C, OC,
                         s.matmul);
  }
  int64_t matmul_scratch_bytes(const Stream&) override { return cpu::matmul_scratch_bytes(); }
  std::string matmul_path(const Stream&) override { return "the CPU GEMM (cuBLASLt is not emulated)"; }

 private:
  cuda::CachingAllocator memory_;
};

}  // namespace

std::unique_ptr<DeviceBackend> make_simt_backend() { return std::make_unique<SimtBackend>(); }

}  // namespace megatrain::test
