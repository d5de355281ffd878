// The kernel half of a DeviceBackend (kernels/cuda/backend.h): every op entry mapped onto the
// launchers of kernels/cuda/cuda.h, with the scratch they need taken from the backend's own
// allocate/deallocate. One source for both builds (see [Note: device backend seam]): the
// production backend derives from cuda::KernelBackend, the emulated one of the tests from
// cuda_simt::KernelBackend (the same file compiled under the host SIMT emulation). What differs
// between the two — memory, copies, the GEMMs — the derived class gives.
#pragma once
#include "kernels/cuda/backend.h"
#include "kernels/cuda/cuda.h"

namespace megatrain::MT_CUDA_NS {

// Device scratch for one call, given back as soon as the call is enqueued: the block is reused
// only on this stream, after this work ([Note: device memory primitives]).
template <class T>
class Scratch {
 public:
  Scratch(DeviceBackend& backend, const Stream& s, size_t count)
      : backend_(backend), ptr_(static_cast<T*>(backend.allocate(s, count * sizeof(T)))) {}
  ~Scratch() { backend_.deallocate(ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return ptr_; }

 private:
  DeviceBackend& backend_;
  T* ptr_;
};

class KernelBackend : public DeviceBackend {
 public:
  void f32_to_half(const Stream& s, Precision to, uint16_t* out, const float* in, int64_t n) override;
  void half_to_f32(const Stream& s, Precision from, float* out, const uint16_t* in, int64_t n) override;
  void layernorm_forward(const Stream& s, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int C, float eps) override;
  void layernorm_backward(const Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* dresidual, const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t N, int C) override;
  void rmsnorm_forward(const Stream& s, float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                       int C, float eps) override;
  void rmsnorm_backward(const Stream& s, float* dinp, float* dweight, const float* dout, const float* dresidual,
                        const float* inp, const float* weight, const float* rstd, int64_t N, int C) override;
  void gelu_forward(const Stream& s, float* out, const float* inp, int64_t n) override;
  void gelu_backward(const Stream& s, float* dinp, const float* dout, const float* inp, int64_t n) override;
  void swiglu_forward(const Stream& s, float* out, const float* inp, int64_t N, int F) override;
  void swiglu_backward(const Stream& s, float* dinp, const float* dout, const float* inp, int64_t N, int F) override;
  void rope_apply(const Stream& s, float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& freq,
                  RopeDirection dir, int pos0) override;
  void attention_forward(const Stream& s, float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv,
                         int D) override;
  void attention_backward(const Stream& s, float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int H, int Hkv, int D) override;
  // The flash kernels only: automatic and flash run them, cudnn is an Error.
  void attention_block_forward(const Stream& s, AttnView<float> out, float* lse, AttnView<const float> q,
                               AttnView<const float> k, AttnView<const float> v, const AttnBlock& b) override;
  void attention_block_backward(const Stream& s, AttnView<float> dq, AttnView<float> dk, AttnView<float> dv,
                                AttnView<const float> dout, AttnView<const float> q, AttnView<const float> k,
                                AttnView<const float> v, AttnView<const float> out, const float* lse,
                                const AttnBlock& b) override;
  void attention_merge(const Stream& s, AttnView<float> out, float* lse, AttnView<const float> part,
                       const float* part_lse, const AttnBlock& b) override;
  void attention_rows_copy(const Stream& s, AttnView<float> dst, AttnView<const float> src, int B, int n, int64_t width,
                           bool accumulate) override;
  void set_attention(AttentionImpl impl) override;
  // The flash kernels, why, and under automatic on a 16-bit precision a warning that this build
  // has no cuDNN attention.
  AttentionPath attention_path(const Stream& s, int B, int T, int H, int Hkv, int D) override;
  void embedding_forward(const Stream& s, float* out, const int32_t* tokens, const float* wte, int64_t N, int V, int C,
                         int vocab_begin) override;
  void embedding_backward(const Stream& s, float* dwte, const float* dout, const int32_t* tokens, int64_t N, int V,
                          int C, int vocab_begin) override;
  void position_embedding_forward(const Stream& s, float* out, const float* wpe, int64_t n, int C, int T,
                                  int64_t first_row) override;
  void position_embedding_backward(const Stream& s, float* dwpe, const float* dout, int64_t n, int C, int T,
                                   int64_t first_row) override;
  void add_forward(const Stream& s, float* out, const float* a, const float* b, int64_t n) override;
  void copy(const Stream& s, float* out, const float* inp, int64_t n) override;
  void dropout_apply(const Stream& s, float* x, int64_t n, float p, const RngKey& key) override;
  void cross_entropy_max(const Stream& s, float* row_max, const float* logits, int64_t N, int V, int valid) override;
  void cross_entropy_sums(const Stream& s, float* sum_exp, float* target_logit, float* logits, const float* row_max,
                          const int32_t* targets, int64_t N, int V, int valid, int vocab_begin, LossGrad grad) override;
  void cross_entropy_finish(const Stream& s, float* losses, float* dlogits, const float* row_max, const float* sum_exp,
                            const float* target_logit, const int32_t* targets, int64_t N, int V, int valid,
                            int vocab_begin, float dlogits_scale) override;
  void moe_permute(const Stream& s, float* send, const float* x, const int32_t* row, int64_t N, int k, int C) override;
  void moe_permute_backward(const Stream& s, float* dx, const float* dsend, const int32_t* row, int64_t N, int k,
                            int C) override;
  void moe_unpermute(const Stream& s, float* y, const float* out, const int32_t* row, const float* gates, int64_t N,
                     int k, int C) override;
  void moe_unpermute_backward(const Stream& s, float* dgates, float* dout, const float* dy, const float* out,
                              const int32_t* row, const float* gates, int64_t N, int k, int C) override;
  double sum_squares(const Stream& s, const FloatRange* ranges, int count) override;
  void scale_inplace(const Stream& s, float* x, int64_t n, float factor) override;
  bool all_finite(const Stream& s, const float* x, int64_t n) override;
  void adamw_update(const Stream& s, const AdamWRange* ranges, int count, const AdamWStep& st) override;

 protected:
  static cudaStream_t stream_of(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }

  AttentionImpl attention_ = AttentionImpl::flash;  // until set_attention
};

}  // namespace megatrain::MT_CUDA_NS
