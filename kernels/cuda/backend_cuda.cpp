// The production DeviceBackend: the kernels of KernelBackend on the current CUDA device, GEMMs
// through cuBLASLt with one GemmContext per stream, attention through cuDNN's fused attention
// where train.attention_backend chooses it (built with MEGATRAIN_HAS_CUDNN), and every device byte
// (buffers, the kernels' scratch, cuDNN's workspaces) from one CachingAllocator over cudaMalloc.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "kernels/cuda/kernel_backend.h"
#ifdef MEGATRAIN_HAS_CUDNN
#include <cudnn.h>

#include "kernels/cuda/cudnn_attention.h"
#endif

namespace megatrain::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("CUDA: {}: {}", what, cudaGetErrorString(e)));
}

GemmMode gemm_mode(const Stream& s) { return GemmMode{s.matmul, Fp32Math::exact}; }

#ifdef MEGATRAIN_HAS_CUDNN
// The cuDNN library this process loaded (not the headers it was built against), as 9.19.0.
std::string cudnn_version() {
  const size_t v = cudnnGetVersion();  // 9.x: major·10000 + minor·100 + patch; 8.x: major·1000 + …
  return v >= 90000 ? fmt::format("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100)
                    : fmt::format("{}.{}.{}", v / 1000, v % 1000 / 100, v % 100);
}
#endif

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

#ifdef MEGATRAIN_HAS_CUDNN
  // cuDNN's path: the float32 tensors rounded to the stream's 16-bit type around it; the
  // statistics are float32 throughout, so lse is written and read in place.
  void set_attention(AttentionImpl impl) override { attention_ = impl; }
  AttentionPath attention_path(const Stream& s, int B, int T, int H, int Hkv, int D) override {
    const bool automatic = attention_ == AttentionImpl::automatic;
    if (attention_ == AttentionImpl::flash || (automatic && s.matmul == Precision::fp32))
      return KernelBackend::attention_path(s, B, T, H, Hkv, D);
    const SdpaProblem p{B, T, H, Hkv, D, s.matmul};
    if (use_cudnn(s, p))  // with cudnn, throws when cuDNN cannot
      return {fmt::format("cuDNN's fused attention on {} copies, float32 softmax (cuDNN {}, train.attention_backend "
                          "= \"{}\")",
                          precision_name(s.matmul), cudnn_version(), automatic ? "auto" : "cudnn"),
              ""};
    const std::string why = cudnn_problem(s, p);  // automatic, refused
    return {fmt::format("the flash-attention kernels, float32 (cuDNN {} refuses the shape)", cudnn_version()),
            fmt::format("train.attention_backend = \"auto\" with precision {} asks for cuDNN's fused attention, but "
                        "cuDNN {} refuses attention of {} × {} tokens, {} heads ({} key/value) of {}: {}; attention "
                        "runs on the float32 flash kernels, slower (a newer cuDNN may take the shape; "
                        "train.attention_backend = \"flash\" chooses them without this warning)",
                        precision_name(s.matmul), cudnn_version(), B, T, H, Hkv, D, why)};
  }
  void attention_forward(const Stream& s, float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv,
                         int D) override {
    const SdpaProblem p{B, T, H, Hkv, D, s.matmul};
    if (!use_cudnn(s, p)) return KernelBackend::attention_forward(s, out, lse, qkv, B, T, H, Hkv, D);
    const int64_t n_qkv = int64_t{B} * T * (H + 2 * Hkv) * D, n_out = int64_t{B} * T * H * D;
    Scratch<uint16_t> qkv16(*this, s, static_cast<size_t>(n_qkv)), out16(*this, s, static_cast<size_t>(n_out));
    f32_to_half(s, s.matmul, qkv16.get(), qkv, n_qkv);
    cudnn().forward(stream_of(s), p, out16.get(), lse, qkv16.get());
    half_to_f32(s, s.matmul, out, out16.get(), n_out);
  }
  void attention_backward(const Stream& s, float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int H, int Hkv, int D) override {
    const SdpaProblem p{B, T, H, Hkv, D, s.matmul};
    if (!use_cudnn(s, p)) return KernelBackend::attention_backward(s, dqkv, dout, qkv, out, lse, B, T, H, Hkv, D);
    const int64_t n_qkv = int64_t{B} * T * (H + 2 * Hkv) * D, n_out = int64_t{B} * T * H * D;
    Scratch<uint16_t> qkv16(*this, s, static_cast<size_t>(n_qkv)), dqkv16(*this, s, static_cast<size_t>(n_qkv));
    Scratch<uint16_t> out16(*this, s, static_cast<size_t>(n_out)), dout16(*this, s, static_cast<size_t>(n_out));
    f32_to_half(s, s.matmul, qkv16.get(), qkv, n_qkv);
    f32_to_half(s, s.matmul, out16.get(), out, n_out);
    f32_to_half(s, s.matmul, dout16.get(), dout, n_out);
    cudnn().backward(stream_of(s), p, dqkv16.get(), dout16.get(), qkv16.get(), out16.get(), lse);
    half_to_f32(s, s.matmul, dqkv, dqkv16.get(), n_qkv);
  }
#endif

 private:
#ifdef MEGATRAIN_HAS_CUDNN
  // "" when cuDNN runs attention of this problem here, else why not.
  std::string cudnn_problem(const Stream& s, const SdpaProblem& p) {
    if (s.matmul == Precision::fp32) return "its fused attention takes bf16 or fp16 tensors; train.precision is fp32";
    return cudnn().unsupported(p);
  }
  // Whether attention of this problem runs on cuDNN: never with flash, where it can with
  // automatic; with cudnn it must (an Error naming the shape and cuDNN's reason otherwise).
  bool use_cudnn(const Stream& s, const SdpaProblem& p) {
    if (attention_ == AttentionImpl::flash) return false;
    const std::string why = cudnn_problem(s, p);
    MT_THROW_UNLESS(Error, why.empty() || attention_ == AttentionImpl::automatic,
                    "train.attention_backend = \"cudnn\", but cuDNN cannot run attention of {} × {} tokens, {} heads "
                    "({} key/value) of {}: {}; set attention_backend = \"auto\" or \"flash\"",
                    p.B, p.T, p.H, p.Hkv, p.D, why);
    return why.empty();
  }
  CudnnAttention& cudnn() {
    const std::lock_guard lock(mutex_);
    if (!cudnn_) cudnn_ = std::make_unique<CudnnAttention>(memory_);
    return *cudnn_;
  }
#endif
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
#ifdef MEGATRAIN_HAS_CUDNN
  std::unique_ptr<CudnnAttention> cudnn_;  // made on the first use of cuDNN
#endif
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
