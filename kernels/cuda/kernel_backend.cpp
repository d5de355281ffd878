// KernelBackend (kernel_backend.h): each DeviceBackend op entry as a call of its launcher, the
// scratch the launcher needs allocated for the call alone.
#include "kernels/cuda/kernel_backend.h"

#include <fmt/format.h>

namespace megatrain::MT_CUDA_NS {
namespace {

// The launchers, whose names the members below share.
namespace k = ::megatrain::MT_CUDA_NS;

}  // namespace

void KernelBackend::f32_to_half(const Stream& s, Precision to, uint16_t* out, const float* in, int64_t n) {
  if (to == Precision::bf16)
    k::f32_to_bf16(stream_of(s), out, in, n);
  else
    k::f32_to_fp16(stream_of(s), out, in, n);
}

void KernelBackend::half_to_f32(const Stream& s, Precision from, float* out, const uint16_t* in, int64_t n) {
  if (from == Precision::bf16)
    k::bf16_to_f32(stream_of(s), out, in, n);
  else
    k::fp16_to_f32(stream_of(s), out, in, n);
}

void KernelBackend::layernorm_forward(const Stream& s, float* out, float* mean, float* rstd, const float* inp,
                                      const float* weight, const float* bias, int64_t N, int C, float eps) {
  k::layernorm_forward(stream_of(s), out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C, eps);
}

void KernelBackend::layernorm_backward(const Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                                       const float* dresidual, const float* inp, const float* weight, const float* mean,
                                       const float* rstd, int64_t N, int C) {
  Scratch<float> scratch(*this, s, k::norm_backward_scratch_floats(N, C));
  k::layernorm_backward(stream_of(s), dinp, dweight, dbias, dout, dresidual, inp, weight, mean, rstd, N, C,
                        scratch.get());
}

void KernelBackend::rmsnorm_forward(const Stream& s, float* out, float* rstd, const float* inp, const float* weight,
                                    int64_t N, int C, float eps) {
  k::rmsnorm_forward(stream_of(s), out, rstd, nullptr, inp, nullptr, weight, N, C, eps);
}

void KernelBackend::rmsnorm_backward(const Stream& s, float* dinp, float* dweight, const float* dout,
                                     const float* dresidual, const float* inp, const float* weight, const float* rstd,
                                     int64_t N, int C) {
  Scratch<float> scratch(*this, s, k::norm_backward_scratch_floats(N, C));
  k::rmsnorm_backward(stream_of(s), dinp, dweight, dout, dresidual, inp, weight, rstd, N, C, scratch.get());
}

void KernelBackend::gelu_forward(const Stream& s, float* out, const float* inp, int64_t n) {
  k::gelu_forward(stream_of(s), out, inp, n);
}

void KernelBackend::gelu_backward(const Stream& s, float* dinp, const float* dout, const float* inp, int64_t n) {
  k::gelu_backward(stream_of(s), dinp, dout, inp, n);
}

void KernelBackend::swiglu_forward(const Stream& s, float* out, const float* inp, int64_t N, int F) {
  k::swiglu_forward(stream_of(s), out, inp, N, F);
}

void KernelBackend::swiglu_backward(const Stream& s, float* dinp, const float* dout, const float* inp, int64_t N,
                                    int F) {
  k::swiglu_backward(stream_of(s), dinp, dout, inp, N, F);
}

void KernelBackend::rope_apply(const Stream& s, float* qkv, int B, int T, int H, int Hkv, int D,
                               const RopeFrequencies& freq, RopeDirection dir, int pos0) {
  if (dir == RopeDirection::forward)
    k::rope_forward(stream_of(s), qkv, B, T, H, Hkv, D, freq, pos0);
  else
    k::rope_backward(stream_of(s), qkv, B, T, H, Hkv, D, freq, pos0);
}

void KernelBackend::attention_forward(const Stream& s, float* out, float* lse, const float* qkv, int B, int T, int H,
                                      int Hkv, int D) {
  k::attention_forward(stream_of(s), out, lse, qkv, B, T, H, Hkv, D);
}

void KernelBackend::attention_backward(const Stream& s, float* dqkv, const float* dout, const float* qkv,
                                       const float* out, const float* lse, int B, int T, int H, int Hkv, int D) {
  Scratch<float> scratch(*this, s, k::attention_backward_scratch_floats(B, T, H));
  k::attention_backward(stream_of(s), dqkv, dout, qkv, out, lse, B, T, H, Hkv, D, scratch.get());
}

void KernelBackend::attention_block_forward(const Stream& s, AttnView<float> out, float* lse, AttnView<const float> q,
                                            AttnView<const float> k, AttnView<const float> v, const AttnBlock& b) {
  k::attention_block_forward(stream_of(s), out, lse, q, k, v, b);
}

void KernelBackend::attention_block_backward(const Stream& s, AttnView<float> dq, AttnView<float> dk,
                                             AttnView<float> dv, AttnView<const float> dout, AttnView<const float> q,
                                             AttnView<const float> k, AttnView<const float> v,
                                             AttnView<const float> out, const float* lse, const AttnBlock& b) {
  Scratch<float> scratch(*this, s, k::attention_block_scratch_floats(b));
  k::attention_block_backward(stream_of(s), dq, dk, dv, dout, q, k, v, out, lse, b, scratch.get());
}

void KernelBackend::attention_merge(const Stream& s, AttnView<float> out, float* lse, AttnView<const float> part,
                                    const float* part_lse, const AttnBlock& b) {
  k::attention_merge(stream_of(s), out, lse, part, part_lse, b);
}

void KernelBackend::attention_rows_copy(const Stream& s, AttnView<float> dst, AttnView<const float> src, int B, int n,
                                        int64_t width, bool accumulate) {
  k::attention_rows_copy(stream_of(s), dst, src, B, n, width, accumulate);
}

void KernelBackend::set_attention(AttentionImpl impl) {
  if (impl == AttentionImpl::cudnn)
    throw Error(
        "cuDNN's fused attention is not in this device backend (the host emulation of the tests, or a build whose "
        "configure step found no cuDNN frontend headers: scripts/setup.sh fetches them); use the flash kernels "
        "(\"auto\" or \"flash\")");
  attention_ = impl;
}

AttentionPath KernelBackend::attention_path(const Stream& s, int, int, int, int, int) {
  if (attention_ == AttentionImpl::flash)
    return {"the flash-attention kernels, float32 (train.attention_backend = \"flash\")", ""};
  if (s.matmul == Precision::fp32)
    return {
        "the flash-attention kernels, float32 (train.precision is fp32; cuDNN's fused attention takes bf16 or "
        "fp16)",
        ""};
  return {"the flash-attention kernels, float32 (this build has no cuDNN attention)",
          fmt::format("train.attention_backend = \"auto\" with precision {} asks for cuDNN's fused attention, but "
                      "this build has no cuDNN attention (the host emulation of the tests, or a build whose configure "
                      "step found no cuDNN frontend headers: scripts/setup.sh fetches them); attention runs on the "
                      "float32 flash kernels, slower (train.attention_backend = \"flash\" chooses them without this "
                      "warning)",
                      precision_name(s.matmul))};
}

void KernelBackend::embedding_forward(const Stream& s, float* out, const int32_t* tokens, const float* wte, int64_t N,
                                      int V, int C, int vocab_begin) {
  k::embedding_forward(stream_of(s), out, tokens, wte, N, V, C, vocab_begin);
}

void KernelBackend::embedding_backward(const Stream& s, float* dwte, const float* dout, const int32_t* tokens,
                                       int64_t N, int V, int C, int vocab_begin) {
  Scratch<int32_t> scratch(*this, s, k::embedding_backward_scratch_ints(N));
  k::embedding_backward(stream_of(s), dwte, dout, tokens, N, V, C, vocab_begin, scratch.get());
}

void KernelBackend::position_embedding_forward(const Stream& s, float* out, const float* wpe, int64_t n, int C, int T,
                                               int64_t first_row) {
  k::position_embedding_forward(stream_of(s), out, wpe, n, C, T, first_row);
}

void KernelBackend::position_embedding_backward(const Stream& s, float* dwpe, const float* dout, int64_t n, int C,
                                                int T, int64_t first_row) {
  k::position_embedding_backward(stream_of(s), dwpe, dout, n, C, T, first_row);
}

void KernelBackend::add_forward(const Stream& s, float* out, const float* a, const float* b, int64_t n) {
  k::add_forward(stream_of(s), out, a, b, n);
}

void KernelBackend::copy(const Stream& s, float* out, const float* inp, int64_t n) {
  k::copy(stream_of(s), out, inp, n);
}

void KernelBackend::dropout_apply(const Stream& s, float* x, int64_t n, float p, const RngKey& key) {
  k::dropout_apply(stream_of(s), x, n, p, key);
}

void KernelBackend::cross_entropy_max(const Stream& s, float* row_max, const float* logits, int64_t N, int V,
                                      int valid) {
  k::cross_entropy_max(stream_of(s), row_max, logits, N, V, valid);
}

void KernelBackend::cross_entropy_sums(const Stream& s, float* sum_exp, float* target_logit, float* logits,
                                       const float* row_max, const int32_t* targets, int64_t N, int V, int valid,
                                       int vocab_begin, LossGrad grad) {
  k::cross_entropy_sums(stream_of(s), sum_exp, target_logit, logits, row_max, targets, N, V, valid, vocab_begin,
                        grad == LossGrad::in_place);
}

void KernelBackend::cross_entropy_finish(const Stream& s, float* losses, float* dlogits, const float* row_max,
                                         const float* sum_exp, const float* target_logit, const int32_t* targets,
                                         int64_t N, int V, int valid, int vocab_begin, float dlogits_scale) {
  k::cross_entropy_finish(stream_of(s), losses, dlogits, row_max, sum_exp, target_logit, targets, N, V, valid,
                          vocab_begin, dlogits_scale);
}

void KernelBackend::moe_permute(const Stream& s, float* send, const float* x, const int32_t* row, int64_t N, int top_k,
                                int C) {
  k::moe_permute(stream_of(s), send, x, row, N * top_k, top_k, C);
}

void KernelBackend::moe_permute_backward(const Stream& s, float* dx, const float* dsend, const int32_t* row, int64_t N,
                                         int top_k, int C) {
  k::moe_permute_backward(stream_of(s), dx, dsend, row, N, top_k, C);
}

void KernelBackend::moe_unpermute(const Stream& s, float* y, const float* out, const int32_t* row, const float* gates,
                                  int64_t N, int top_k, int C) {
  k::moe_unpermute(stream_of(s), y, out, row, gates, N, top_k, C);
}

void KernelBackend::moe_unpermute_backward(const Stream& s, float* dgates, float* dout, const float* dy,
                                           const float* out, const int32_t* row, const float* gates, int64_t N,
                                           int top_k, int C) {
  k::moe_unpermute_backward(stream_of(s), dgates, dout, dy, out, row, gates, N, top_k, C);
}

double KernelBackend::sum_squares(const Stream& s, const FloatRange* ranges, int count) {
  Scratch<double> partials(*this, s, k::sum_squares_scratch_doubles(ranges, count)), total(*this, s, 1);
  k::sum_squares(stream_of(s), total.get(), ranges, count, partials.get());
  double sum = 0.0;
  copy_to_host(s, &sum, total.get(), sizeof sum);
  return sum;
}

bool KernelBackend::all_finite(const Stream& s, const float* x, int64_t n) {
  const FloatRange range{x, n};
  Scratch<int> flag(*this, s, 1);
  memset(s, flag.get(), 0, sizeof(int));
  k::nonfinite_flag(stream_of(s), flag.get(), &range, 1);
  int bad = 0;
  copy_to_host(s, &bad, flag.get(), sizeof bad);
  return bad == 0;
}

void KernelBackend::scale_inplace(const Stream& s, float* x, int64_t n, float factor) {
  k::scale_inplace(stream_of(s), x, n, factor);
}

void KernelBackend::adamw_update(const Stream& s, const AdamWRange* ranges, int count, const AdamWStep& st) {
  k::adamw_update(stream_of(s), ranges, count, st);
}

}  // namespace megatrain::MT_CUDA_NS
