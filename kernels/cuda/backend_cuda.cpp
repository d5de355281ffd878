// The production DeviceBackend: the kernels of KernelBackend on the current CUDA device, GEMMs
// through cuBLASLt with one GemmContext per stream, and every device byte (buffers and the
// kernels' scratch) from one CachingAllocator over cudaMalloc.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "kernels/cuda/kernel_backend.h"

namespace megatrain::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("CUDA: {}: {}", what, cudaGetErrorString(e)));
}

GemmMode gemm_mode(const Stream& s) { return GemmMode{s.matmul, Fp32Math::exact}; }

class CudaBackend final : public KernelBackend {
 public:
  CudaBackend() : memory_(cuda_raw_allocator()) {}

  void* allocate(const Stream& s, size_t bytes) override { return memory_.allocate(bytes, s.handle); }
  void deallocate(void* ptr) override { memory_.deallocate(ptr); }
  void copy_to_device(const Stream& s, void* dst, const void* host_src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_of(s)), "cudaMemcpyAsync to device");
    // A pinned source would still be read after the return; the contract lets the caller reuse it.
    synchronize(s);
  }
  void copy_to_host(const Stream& s, void* host_dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(s)), "cudaMemcpyAsync to host");
    synchronize(s);
  }
  void copy_on_device(const Stream& s, void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(s)), "cudaMemcpyAsync on device");
  }
  void memset(const Stream& s, void* dst, int byte, size_t bytes) override {
    check(cudaMemsetAsync(dst, byte, bytes, stream_of(s)), "cudaMemsetAsync");
  }
  void synchronize(const Stream& s) override { stream_synchronize(stream_of(s)); }
  AllocatorStats memory_stats() const override { return memory_.stats(); }

  void matmul_forward(const Stream& s, float* out, const float* inp, const float* weight, const float* bias,
                      int64_t N, int C, int OC) override {
    cuda::matmul_forward(stream_of(s), gemm(s), out, nullptr, inp, weight, bias, N, C, OC, gemm_mode(s));
  }
  void matmul_backward(const Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int64_t N, int C, int OC) override {
    cuda::matmul_backward(stream_of(s), gemm(s), dinp, dweight, dbias, dout, inp, weight, nullptr, N, C, OC,
                          gemm_mode(s));
  }
  int64_t matmul_scratch_bytes(const Stream&) override {
    const std::lock_guard lock(mutex_);
    int64_t bytes = 0;
    for (const auto& [stream, ctx] : gemms_) bytes += ctx->scratch_bytes();
    return bytes;
  }
  std::string matmul_path(const Stream& s) override {
    return fmt::format("cuBLASLt with {} operands and float32 sums", precision_name(s.matmul));
  }

 private:
  // The stream's GEMM context, made on its first GEMM.
  GemmContext& gemm(const Stream& s) {
    const std::lock_guard lock(mutex_);
    auto& ctx = gemms_[s.handle];
    if (!ctx) ctx = std::make_unique<GemmContext>(stream_of(s), memory_);
    return *ctx;
  }

  CachingAllocator memory_;  // declared first: the contexts give their memory back to it
  std::mutex mutex_;
  std::unordered_map<void*, std::unique_ptr<GemmContext>> gemms_;
};

}  // namespace

std::unique_ptr<DeviceBackend> make_backend() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0)
    throw Error(fmt::format("no CUDA device is visible to this process ({}); run on a machine with a GPU and its "
                            "driver, check CUDA_VISIBLE_DEVICES, or use CPU streams",
                            e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none"));
  return std::make_unique<CudaBackend>();
}

}  // namespace megatrain::cuda
