// The CUDA backend: plain device pointers and sizes, no Tensor, each call enqueued on `stream`.
// Semantics are those of the CPU op of the same name (kernels/ops.h); where a kernel fuses more
// (a residual add into the norm), the comment says so. This header needs no CUDA header, so the
// dispatch layer includes it on every build; the definitions (kernels/cuda/*.cu) are compiled only
// with MEGATRAIN_CUDA, and in the tests under the host SIMT emulation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/device.h"

#include "kernels/attention_block.h"
#include "kernels/rng.h"
#include "kernels/rope_frequencies.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct CUevent_st;
typedef struct CUevent_st* cudaEvent_t;

namespace megatrain {
struct AdamWStep;   // kernels/ops.h
struct AdamWRange;  // kernels/ops.h
struct FloatRange;  // kernels/ops.h
}  // namespace megatrain

// megatrain::cuda, or megatrain::cuda_simt in a test that compiles the kernels under the host SIMT
// emulation: the two builds of the same source then never meet at link time (a test also links
// the real backend through mt_kernels).
#ifdef MEGATRAIN_SIMT
#define MT_CUDA_NS cuda_simt
#else
#define MT_CUDA_NS cuda
#endif

namespace megatrain::cuda {
class CachingAllocator;  // kernels/cuda/caching_allocator.h
}

namespace megatrain::MT_CUDA_NS {

// ---- streams and events (kernels/cuda/stream.cu; kernels/device.h wraps them) ----
// A stream that does not synchronise with the legacy default stream (cudaStreamNonBlocking).
cudaStream_t stream_create();
void stream_destroy(cudaStream_t stream) noexcept;  // errors surface at the next checked call
void stream_synchronize(cudaStream_t stream);
cudaEvent_t event_create();  // with timing
void event_destroy(cudaEvent_t event) noexcept;
void event_record(cudaEvent_t event, cudaStream_t stream);
void stream_wait_event(cudaStream_t stream, cudaEvent_t event);
void event_synchronize(cudaEvent_t event);
float event_elapsed_ms(cudaEvent_t start, cudaEvent_t end);

// ---- GEMMs through cuBLASLt (kernels/cuda/gemm.cu), the ops.h matmul semantics on device pointers ----
// fp32 precision multiplies float32 values exactly unless fp32_math is tf32 (TensorFloat-32 inputs:
// faster, 10-bit mantissas); bf16/fp16 multiply the operands' 16-bit roundings. Sums and outputs
// are float32 in every mode.
enum class Fp32Math : uint8_t { exact, tf32 };
struct GemmMode {
  Precision precision = Precision::fp32;
  Fp32Math fp32_math = Fp32Math::exact;
};

// What the GEMMs of one stream keep between calls: the cuBLASLt handle, a workspace, the plans
// cached per problem (kernels/cuda/gemm_plan.h) with the way each problem ran (a fallback's:
// kernels/cuda/gemm_fallback.h; cuBLAS's handle for cublasGemmEx, made on its first use) and
// grow-only scratch (16-bit operand copies, bias gradient partials), all taken from `memory` on
// `stream`. Serves that stream only, one call at a time.
class GemmContext {
 public:
  static constexpr size_t kDefaultWorkspace = size_t{32} << 20;  // what cuBLAS asks for on Hopper
  GemmContext(cudaStream_t stream, cuda::CachingAllocator& memory, size_t workspace_bytes = kDefaultWorkspace);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;
  // Device bytes held: workspace and scratch (the memory accounting's gemm_scratch).
  int64_t scratch_bytes() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// out (N, OC) = inp (N, C) · weightᵀ (OC, C) + bias (OC, or nullptr). With pre_gelu (N, OC) given,
// pre_gelu gets that sum and out = gelu(pre_gelu) (tanh form, as gelu_forward); OC % 8 == 0 then.
void matmul_forward(cudaStream_t stream, GemmContext& ctx, float* out, float* pre_gelu, const float* inp,
                    const float* weight, const float* bias, int64_t N, int C, int OC, GemmMode mode);
// dinp (N, C) = dout (N, OC) · weight (OC, C); with gelu_pre (N, C) given — the pre-activation of
// the GELU that produced inp — dinp = (dout · weight) ⊙ gelu'(gelu_pre), C % 8 == 0.
// dweight (OC, C) += doutᵀ · inp; dbias (OC) += Σ_n dout. Each output may be nullptr (skipped).
void matmul_backward(cudaStream_t stream, GemmContext& ctx, float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight, const float* gelu_pre, int64_t N, int C,
                     int OC, GemmMode mode);

// ---- normalisation (kernels/cuda/norm.cu) ----
// With `residual` given, first residual_out = inp + residual, and the norm is of that sum (the
// pre-norm block's residual add fused into the next norm); otherwise of inp, residual_out unused.
void layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd, float* residual_out, const float* inp,
                       const float* residual, const float* weight, const float* bias, int64_t N, int C, float eps);
void rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, float* residual_out, const float* inp,
                     const float* residual, const float* weight, int64_t N, int C, float eps);
// Floats of scratch the backward passes need for their weight gradients (column partial sums).
size_t norm_backward_scratch_floats(int64_t N, int C);
void layernorm_backward(cudaStream_t stream, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* dresidual, const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int C, float* scratch);
void rmsnorm_backward(cudaStream_t stream, float* dinp, float* dweight, const float* dout, const float* dresidual,
                      const float* inp, const float* weight, const float* rstd, int64_t N, int C, float* scratch);

// ---- causal attention (kernels/cuda/attention.cu) ----
// Semantics of cpu::attention_forward / attention_backward: qkv (B, T, (H + 2·Hkv)·D), out
// (B, T, H·D), lse (B, H, T); query head h reads kv head h / (H / Hkv). Backward writes (=) all of
// dqkv and needs attention_backward_scratch_floats of scratch. Deterministic (no atomics).
// Runs for head_dim 1 to 128 with Hkv dividing H; the launchers throw otherwise.
bool attention_can_run(int H, int Hkv, int D);
void attention_forward(cudaStream_t stream, float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv,
                       int D);
size_t attention_backward_scratch_floats(int B, int T, int H);
void attention_backward(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int H, int Hkv, int D, float* scratch);

// The block form (semantics of cpu::attention_block_forward / backward, kernels/attention_block.h):
// views in device memory; the backward adds (+=) into dq, dk and dv and needs
// attention_block_scratch_floats of scratch.
void attention_block_forward(cudaStream_t stream, AttnView<float> out, float* lse, AttnView<const float> q,
                             AttnView<const float> k, AttnView<const float> v, const AttnBlock& b);
size_t attention_block_scratch_floats(const AttnBlock& b);
void attention_block_backward(cudaStream_t stream, AttnView<float> dq, AttnView<float> dk, AttnView<float> dv,
                              AttnView<const float> dout, AttnView<const float> q, AttnView<const float> k,
                              AttnView<const float> v, AttnView<const float> out, const float* lse, const AttnBlock& b,
                              float* scratch);
// (kernels/cuda/attention_block.cu) cpu::attention_merge's semantics (b.Tq rows), and the rows copy
// of ops.h attention_rows_copy: n rows of `width` floats per sequence, added with `accumulate`.
void attention_merge(cudaStream_t stream, AttnView<float> out, float* lse, AttnView<const float> part,
                     const float* part_lse, const AttnBlock& b);
void attention_rows_copy(cudaStream_t stream, AttnView<float> dst, AttnView<const float> src, int B, int n,
                         int64_t width, bool accumulate);

// ---- cross-entropy (kernels/cuda/cross_entropy.cu) ----
// The three vocabulary-parallel steps of ops.h with the CPU ops' arguments (store_exp:
// LossGrad::in_place; dlogits = nullptr: losses only).
void cross_entropy_max(cudaStream_t stream, float* row_max, const float* logits, int64_t N, int V, int valid);
void cross_entropy_sums(cudaStream_t stream, float* sum_exp, float* target_logit, float* logits, const float* row_max,
                        const int32_t* targets, int64_t N, int V, int valid, int vocab_begin, bool store_exp);
void cross_entropy_finish(cudaStream_t stream, float* losses, float* dlogits, const float* row_max,
                          const float* sum_exp, const float* target_logit, const int32_t* targets, int64_t N, int V,
                          int valid, int vocab_begin, float scale);
// All three in one pass over an unsplit vocabulary (vocab_begin 0): losses, and with `grad` the
// logits replaced by (softmax − onehot)·scale (0 in the padding columns ≥ valid).
void cross_entropy_fused(cudaStream_t stream, float* losses, float* logits, const int32_t* targets, int64_t N, int V,
                         int valid, float scale, bool grad);

// ---- AdamW (kernels/cuda/adamw.cu) ----
// cpu::adamw_update on each range of the list, in as few launches as the list allows.
using megatrain::AdamWRange;  // kernels/ops.h
void adamw_update(cudaStream_t stream, const AdamWRange* ranges, int count, const AdamWStep& st);

// ---- gradient norm and finiteness (kernels/cuda/grad_norm.cu) ----
using megatrain::FloatRange;  // kernels/ops.h
// *out (device) = Σ x² over all the ranges, in double, bitwise reproducible for a given list;
// scratch: sum_squares_scratch_doubles(ranges, count) doubles of device memory.
size_t sum_squares_scratch_doubles(const FloatRange* ranges, int count);
void sum_squares(cudaStream_t stream, double* out, const FloatRange* ranges, int count, double* scratch);
// Sets *flag (device) to 1 when any value of the ranges is NaN or ±Inf; leaves it as it was
// otherwise, so the caller zeroes it once and may check several lists into it.
void nonfinite_flag(cudaStream_t stream, int* flag, const FloatRange* ranges, int count);

// ---- MoE routing (kernels/cuda/moe_router.cu) ----
// model/moe_router.h's router_forward up to capacity: scores (N, E), expert (N, k), gates (N, k)
// and kept (N, k, all 1), softmax or sigmoid scores, bias (E, or nullptr) in the choice only.
// n_experts ≤ 1024. A NaN score ranks below every number (the CPU keeps a NaN first expert).
void moe_route(cudaStream_t stream, float* scores, int32_t* expert, float* gates, int32_t* kept, const float* logits,
               const float* bias, int64_t N, int E, int k, bool sigmoid);
// router_backward: dlogits (N, E) from the gates' gradient dgates (N, k) and the aux and z loss
// coefficients (0: off). scratch: moe_plan_scratch_ints(N·k, E) ints of device memory.
void moe_router_backward(cudaStream_t stream, float* dlogits, const float* logits, const float* scores,
                         const int32_t* expert, const int32_t* kept, const float* dgates, float aux_grad, float z_grad,
                         int64_t N, int E, int k, bool sigmoid, int32_t* scratch);
// The permutation of the n_assignments = N·k assignments a = t·k + j into expert-contiguous rows
// (model/moe.cpp): row[a] = where a's token goes in the send buffer (−1: not kept), experts in
// order, each expert's assignments in a order. Only assignments with kept[a] = 1 take part; past
// `capacity` per expert the later ones (in a order) are dropped: kept and gate set to 0 (drop =
// position; pass N for none). tokens_per_expert (E, device): the kept rows of each expert.
// scratch: moe_plan_scratch_ints(n_assignments, E) ints of device memory.
size_t moe_plan_scratch_ints(int64_t n_assignments, int E);
void moe_permute_plan(cudaStream_t stream, int32_t* row, int32_t* kept, float* gates, int64_t* tokens_per_expert,
                      const int32_t* expert, int64_t n_assignments, int E, int64_t capacity, int32_t* scratch);
// send[row[a]] = x[a / k] (C floats a row); backward: dx[t] += Σ_j dsend[row[t·k + j]].
void moe_permute(cudaStream_t stream, float* send, const float* x, const int32_t* row, int64_t n_assignments, int k,
                 int C);
void moe_permute_backward(cudaStream_t stream, float* dx, const float* dsend, const int32_t* row, int64_t N, int k,
                          int C);
// y[t] = Σ_j gates[t·k + j] · out[row[t·k + j]] over kept choices (the combine); backward:
// dgates[a] = dy[a / k] · out[row[a]] (0 when dropped), dout[row[a]] = gates[a] · dy[a / k].
void moe_unpermute(cudaStream_t stream, float* y, const float* out, const int32_t* row, const float* gates, int64_t N,
                   int k, int C);
void moe_unpermute_backward(cudaStream_t stream, float* dgates, float* dout, const float* dy, const float* out,
                            const int32_t* row, const float* gates, int64_t N, int k, int C);

// ---- activations (kernels/cuda/activation.cu) ----
void gelu_forward(cudaStream_t stream, float* out, const float* inp, int64_t n);
void gelu_backward(cudaStream_t stream, float* dinp, const float* dout, const float* inp, int64_t n);
// The bias of the linear layer before the GELU fused in: out = gelu(inp + bias), inp (N, OC) being
// the GEMM's output without bias. Backward: dinp = ∂loss/∂(inp + bias), and dbias += its column
// sums (deterministic, column_sum.cuh) unless dbias is null; dinp may be dout.
void bias_gelu_forward(cudaStream_t stream, float* out, const float* inp, const float* bias, int64_t N, int OC);
size_t bias_gelu_backward_scratch_floats(int64_t N, int OC);
void bias_gelu_backward(cudaStream_t stream, float* dinp, float* dbias, const float* dout, const float* inp,
                        const float* bias, int64_t N, int OC, float* scratch);
void swiglu_forward(cudaStream_t stream, float* out, const float* inp, int64_t N, int F);
void swiglu_backward(cudaStream_t stream, float* dinp, const float* dout, const float* inp, int64_t N, int F);

// ---- rotary position embedding (kernels/cuda/rope.cu) ----
// In place on qkv (B, T, (H + 2·Hkv)·D); backward rotates by −θ.
void rope_forward(cudaStream_t stream, float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& freq,
                  int pos0);
void rope_backward(cudaStream_t stream, float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& freq,
                   int pos0);

// ---- embeddings (kernels/cuda/embedding.cu) ----
void embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte, int64_t N, int V,
                       int C, int vocab_begin);
// Deterministic: each row of dwte adds its tokens' gradients in token order, as the CPU does (the
// result is bitwise the CPU's). Scratch: a stable sort of the tokens by row.
size_t embedding_backward_scratch_ints(int64_t N);
void embedding_backward(cudaStream_t stream, float* dwte, const float* dout, const int32_t* tokens, int64_t N, int V,
                        int C, int vocab_begin, int32_t* scratch);
void position_embedding_forward(cudaStream_t stream, float* out, const float* wpe, int64_t n, int C, int T,
                                int64_t first_row);
// Each position adds its rows in row order (bitwise the CPU's).
void position_embedding_backward(cudaStream_t stream, float* dwpe, const float* dout, int64_t n, int C, int T,
                                 int64_t first_row);

// ---- elementwise (kernels/cuda/elementwise.cu): bitwise the CPU's results ----
void add_forward(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n);
// out (N, C) += bias (C) on every row: the bias of a GEMM that ran without its epilogue (gemm.cu).
void bias_add(cudaStream_t stream, float* out, const float* bias, int64_t N, int C);
void copy(cudaStream_t stream, float* out, const float* inp, int64_t n);
void scale_inplace(cudaStream_t stream, float* x, int64_t n, float factor);
void dropout_apply(cudaStream_t stream, float* x, int64_t n, float p, const RngKey& key);
// float32 ↔ 16-bit raw bits (kernels/half.h; cpu::f32_to_half and friends); out may be inp in round_to_*.
void f32_to_bf16(cudaStream_t stream, uint16_t* out, const float* inp, int64_t n);
void f32_to_fp16(cudaStream_t stream, uint16_t* out, const float* inp, int64_t n);
void bf16_to_f32(cudaStream_t stream, float* out, const uint16_t* inp, int64_t n);
void fp16_to_f32(cudaStream_t stream, float* out, const uint16_t* inp, int64_t n);
void round_to_bf16(cudaStream_t stream, float* out, const float* inp, int64_t n);
void round_to_fp16(cudaStream_t stream, float* out, const float* inp, int64_t n);

}  // namespace megatrain::MT_CUDA_NS
