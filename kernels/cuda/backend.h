// The device backend behind the ops of kernels/ops.h on Device::cuda streams: one entry per op
// that has a CUDA kernel, on device pointers and sizes with the semantics of the op of the same
// name (ops.cpp has checked shapes, dtypes and devices before it calls one), and the memory
// primitives a caller of those ops needs. Plain C++: this header names no CUDA type.
//
// [Note: device backend seam]
// ops.cpp calls this interface, not cuda:: directly (docs/architecture.md §Dispatch), so that the same
// dispatch runs either the production backend (kernels/cuda/backend_cuda.cpp: cuBLASLt GEMMs and
// the caching allocator on a GPU) or, in tests, the same kernel source under the host SIMT
// emulation (tests/simt/backend_simt.h), which checks ops.cpp's Tensor → pointer mapping and the
// backend's pointer → kernel mapping (kernels/cuda/kernel_backend.cpp, shared by both) on a
// machine without a GPU. The price is one virtual call per op, next to a kernel launch.
// Ops with no CUDA kernel throw on a CUDA stream (ops.cpp), never fall back to the CPU silently:
// attention_decode_forward (KV-cache inference runs on CPU streams).
//
// [Note: device memory primitives]
// Device memory comes from allocate(s, bytes) and goes back through deallocate; a block is
// reused only on the stream it was allocated on, so freeing right after enqueueing the last work
// that uses it is safe (a block used on a second stream must be ordered with an Event first).
// Copies and memset are enqueued on s; the host copies return once the host side may be reused
// (copy_to_host: once the bytes have arrived). A trainer's arenas and flat buffers on the device
// are single allocate() calls carved as on the CPU; memory_stats() feeds the memory accounting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/attention_block.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/ops.h"

namespace megatrain {

// The attention kernels a run uses, for its start-up log (trainer/train.cpp). `path`: which kernels
// and why those. `warning`: non-empty when the run asked for cuDNN's fused attention
// (train.attention_backend = "auto" on bf16 or fp16) and does not get it, saying why — the cuDNN
// version and its reason, or a build without cuDNN's attention — since the float32 flash kernels
// that run instead are slower.
struct AttentionPath {
  std::string path;
  std::string warning;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // ---- memory (see [Note: device memory primitives]) ----
  virtual void* allocate(const Stream& s, size_t bytes) = 0;  // nullptr for 0 bytes
  virtual void deallocate(void* ptr) = 0;                     // nullptr is ignored
  virtual void copy_to_device(const Stream& s, void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(const Stream& s, void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_on_device(const Stream& s, void* dst, const void* src, size_t bytes) = 0;
  virtual void memset(const Stream& s, void* dst, int byte, size_t bytes) = 0;
  virtual void synchronize(const Stream& s) = 0;  // the host waits for everything enqueued on s
  virtual cuda::AllocatorStats memory_stats() const = 0;
  // Whether the host, and so MPI, reads and writes this backend's memory directly: true for the
  // host emulation, false for a GPU (a run on one moves device buffers through NCCL).
  virtual bool host_addressable() const { return false; }

  // ---- linear layers: the GEMMs, and what they hold ----
  virtual void matmul_forward(const Stream& s, float* out, const float* inp, const float* weight, const float* bias,
                              int64_t N, int C, int OC) = 0;
  virtual void matmul_backward(const Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int64_t N, int C, int OC) = 0;
  virtual int64_t matmul_scratch_bytes(const Stream& s) = 0;
  virtual std::string matmul_path(const Stream& s) = 0;

  // ---- the kernels (kernels/cuda/kernel_backend.cpp) ----
  virtual void f32_to_half(const Stream& s, Precision to, uint16_t* out, const float* in, int64_t n) = 0;
  virtual void half_to_f32(const Stream& s, Precision from, float* out, const uint16_t* in, int64_t n) = 0;
  virtual void layernorm_forward(const Stream& s, float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int64_t N, int C, float eps) = 0;
  virtual void layernorm_backward(const Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* dresidual, const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int64_t N, int C) = 0;
  virtual void rmsnorm_forward(const Stream& s, float* out, float* rstd, const float* inp, const float* weight,
                               int64_t N, int C, float eps) = 0;
  virtual void rmsnorm_backward(const Stream& s, float* dinp, float* dweight, const float* dout, const float* dresidual,
                                const float* inp, const float* weight, const float* rstd, int64_t N, int C) = 0;
  virtual void gelu_forward(const Stream& s, float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(const Stream& s, float* dinp, const float* dout, const float* inp, int64_t n) = 0;
  virtual void swiglu_forward(const Stream& s, float* out, const float* inp, int64_t N, int F) = 0;
  virtual void swiglu_backward(const Stream& s, float* dinp, const float* dout, const float* inp, int64_t N, int F) = 0;
  virtual void rope_apply(const Stream& s, float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& freq,
                          RopeDirection dir, int pos0) = 0;
  virtual void attention_forward(const Stream& s, float* out, float* lse, const float* qkv, int B, int T, int H,
                                 int Hkv, int D) = 0;
  virtual void attention_backward(const Stream& s, float* dqkv, const float* dout, const float* qkv, const float* out,
                                  const float* lse, int B, int T, int H, int Hkv, int D) = 0;
  // The implementation the two entries above run, for the rest of the process (kernels/ops.h
  // AttentionImpl; flash until this is called). A backend without cuDNN's attention runs flash for
  // automatic and throws Error for cudnn, saying why.
  virtual void set_attention(AttentionImpl impl) = 0;
  // What attention of this shape runs as on stream s, and why (the start-up log); with automatic
  // this may build cuDNN's plans for the shape.
  virtual AttentionPath attention_path(const Stream& s, int B, int T, int H, int Hkv, int D) = 0;
  // Context parallelism's block attention (kernels/ops.h attention_block_forward, …), on views of
  // device memory; the backward adds into dq, dk and dv.
  virtual void attention_block_forward(const Stream& s, AttnView<float> out, float* lse, AttnView<const float> q,
                                       AttnView<const float> k, AttnView<const float> v, const AttnBlock& b) = 0;
  virtual void attention_block_backward(const Stream& s, AttnView<float> dq, AttnView<float> dk, AttnView<float> dv,
                                        AttnView<const float> dout, AttnView<const float> q, AttnView<const float> k,
                                        AttnView<const float> v, AttnView<const float> out, const float* lse,
                                        const AttnBlock& b) = 0;
  virtual void attention_merge(const Stream& s, AttnView<float> out, float* lse, AttnView<const float> part,
                               const float* part_lse, const AttnBlock& b) = 0;
  virtual void attention_rows_copy(const Stream& s, AttnView<float> dst, AttnView<const float> src, int B, int n,
                                   int64_t width, bool accumulate) = 0;
  virtual void embedding_forward(const Stream& s, float* out, const int32_t* tokens, const float* wte, int64_t N, int V,
                                 int C, int vocab_begin) = 0;
  virtual void embedding_backward(const Stream& s, float* dwte, const float* dout, const int32_t* tokens, int64_t N,
                                  int V, int C, int vocab_begin) = 0;
  virtual void position_embedding_forward(const Stream& s, float* out, const float* wpe, int64_t n, int C, int T,
                                          int64_t first_row) = 0;
  virtual void position_embedding_backward(const Stream& s, float* dwpe, const float* dout, int64_t n, int C, int T,
                                           int64_t first_row) = 0;
  virtual void add_forward(const Stream& s, float* out, const float* a, const float* b, int64_t n) = 0;
  virtual void copy(const Stream& s, float* out, const float* inp, int64_t n) = 0;
  virtual void dropout_apply(const Stream& s, float* x, int64_t n, float p, const RngKey& key) = 0;
  virtual void cross_entropy_max(const Stream& s, float* row_max, const float* logits, int64_t N, int V, int valid) = 0;
  virtual void cross_entropy_sums(const Stream& s, float* sum_exp, float* target_logit, float* logits,
                                  const float* row_max, const int32_t* targets, int64_t N, int V, int valid,
                                  int vocab_begin, LossGrad grad) = 0;
  // dlogits: the logits (holding step 2's exponentials) for LossGrad::in_place, else nullptr.
  virtual void cross_entropy_finish(const Stream& s, float* losses, float* dlogits, const float* row_max,
                                    const float* sum_exp, const float* target_logit, const int32_t* targets, int64_t N,
                                    int V, int valid, int vocab_begin, float dlogits_scale) = 0;
  // Mixture of Experts token movement (N tokens, k choices, rows of C floats).
  virtual void moe_permute(const Stream& s, float* send, const float* x, const int32_t* row, int64_t N, int k,
                           int C) = 0;
  virtual void moe_permute_backward(const Stream& s, float* dx, const float* dsend, const int32_t* row, int64_t N,
                                    int k, int C) = 0;
  virtual void moe_unpermute(const Stream& s, float* y, const float* out, const int32_t* row, const float* gates,
                             int64_t N, int k, int C) = 0;
  virtual void moe_unpermute_backward(const Stream& s, float* dgates, float* dout, const float* dy, const float* out,
                                      const int32_t* row, const float* gates, int64_t N, int k, int C) = 0;
  // Waits for the sum (it returns to the host).
  virtual double sum_squares(const Stream& s, const FloatRange* ranges, int count) = 0;
  virtual void scale_inplace(const Stream& s, float* x, int64_t n, float factor) = 0;
  virtual bool all_finite(const Stream& s, const float* x, int64_t n) = 0;  // waits for the flag
  virtual void adamw_update(const Stream& s, const AdamWRange* ranges, int count, const AdamWStep& st) = 0;
};

// The backend of Device::cuda streams: the one set with set_cuda_backend, else in a CUDA build
// the production backend, made on first use (it throws when no CUDA device is visible). Throws
// naming the fix in a build without the CUDA backend.
DeviceBackend& cuda_backend();
// Makes `backend` (owned by the caller, outliving its use) the backend of Device::cuda streams;
// nullptr goes back to the default. Not to be called while ops run on other threads.
void set_cuda_backend(DeviceBackend* backend);

namespace cuda {
// The production backend (kernels/cuda/backend_cuda.cpp, CUDA builds only): kernels on the
// current device, cuBLASLt GEMMs, device memory through a CachingAllocator.
std::unique_ptr<DeviceBackend> make_backend();
}  // namespace cuda

}  // namespace megatrain
