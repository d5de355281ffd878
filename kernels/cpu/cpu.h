// The CPU backend: plain pointers and sizes, no Tensor. Row-major throughout. OpenMP inside;
// every reduction has a fixed order independent of the thread count, so results are bitwise
// reproducible run to run. Semantics of each op are documented once, in kernels/ops.h.
// Activations may be bf16 (kernels/cpu/bf16.h): the bf16 overloads compute in float32 and round
// each result once; a bf16 overload on inputs that are bf16 values gives the float32 overload's
// result rounded (bitwise so for the norms, the activations and RoPE; within the float32 op's own
// rounding for the GEMMs and attention, whose block products may sum in another order).
#pragma once
#include <cstdint>

#include "kernels/attention_block.h"
#include "kernels/cpu/bf16.h"
#include "kernels/ops.h"

namespace megatrain::cpu {

// An operand of the linear layers' GEMMs: float32 or bf16 values (dtype f32 or bf16).
struct MatmulArg {
  const void* data;
  DType dtype;
};
// The GEMMs multiply the inputs' roundings to `p` (kernels/device.h), with float32 sums; bf16
// operands need p = bf16. The forward's result is float32 or (out_dtype bf16) rounded from its
// float32 sums; the gradients are float32.
void matmul_forward(void* out, DType out_dtype, MatmulArg inp, MatmulArg weight, const float* bias, int64_t N, int C,
                    int OC, Precision p);
void matmul_backward(float* dinp, float* dweight, float* dbias, MatmulArg dout, MatmulArg inp, MatmulArg weight,
                     int64_t N, int C, int OC, Precision p);
int64_t matmul_scratch_bytes();

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int C, float eps);
void layernorm_forward(bf16* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* dresidual,
                        const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N, int C);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C, float eps);
void rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* weight, int64_t N, int C, float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* dresidual, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int C);

void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_forward(bf16* out, const bf16* inp, int64_t n);
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
void gelu_backward(bf16* dinp, const float* dout, const bf16* inp, int64_t n);
void swiglu_forward(float* out, const float* inp, int64_t N, int F);
void swiglu_forward(bf16* out, const bf16* inp, int64_t N, int F);
void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t N, int F);
void swiglu_backward(bf16* dinp, const float* dout, const bf16* inp, int64_t N, int F);

void rope_apply(float* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& f, bool inverse, int pos0 = 0);
void rope_apply(bf16* qkv, int B, int T, int H, int Hkv, int D, const RopeFrequencies& f, bool inverse, int pos0 = 0);

struct AttnDims {
  int B, T, H, Hkv, D;
  const int32_t* first_key = nullptr;  // (B, T), or null: as AttnBlock's
};
void attention_forward(float* out, float* lse, const float* qkv, const AttnDims& d);
void attention_forward(bf16* out, float* lse, const bf16* qkv, const AttnDims& d);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const AttnDims& d);
void attention_backward(bf16* dqkv, const float* dout, const bf16* qkv, const bf16* out, const float* lse,
                        const AttnDims& d);
void attention_block_forward(AttnView<float> out, float* lse, AttnView<const float> q, AttnView<const float> k,
                             AttnView<const float> v, const AttnBlock& d);
// `+=` into dq, dk and dv; out and lse are the final ones (every block merged).
void attention_block_backward(AttnView<float> dq, AttnView<float> dk, AttnView<float> dv, AttnView<const float> dout,
                              AttnView<const float> q, AttnView<const float> k, AttnView<const float> v,
                              AttnView<const float> out, const float* lse, const AttnBlock& d);
// (out, lse) ← the softmax merge of (out, lse) and (part, part_lse), rows d.Tq (d.Tk, d.causal unused).
void attention_merge(AttnView<float> out, float* lse, AttnView<const float> part, const float* part_lse,
                     const AttnBlock& d);
// n rows of `width` floats of each of B sequences: dst ← src, or dst += src with `accumulate`.
void attention_rows_copy(AttnView<float> dst, AttnView<const float> src, int B, int n, int64_t width, bool accumulate);
// d.B and d.T unused: n query rows, cache rows [0, pos0 + n) filled.
void attention_decode_forward(float* out, const float* q, const float* k_cache, const float* v_cache, int n, int pos0,
                              const AttnDims& d);

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N, int V, int C, int vocab_begin);
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int V, int C,
                        int vocab_begin);
void position_embedding_forward(float* out, const float* wpe, int64_t n, int C, int T, int64_t first_row);
void position_embedding_backward(float* dwpe, const float* dout, int64_t n, int C, int T, int64_t first_row);

void add_forward(float* out, const float* a, const float* b, int64_t n);
void dropout_apply(float* x, int64_t n, float p, const RngKey& key);
void cross_entropy_max(float* row_max, const float* logits, int64_t N, int V, int valid);
void cross_entropy_sums(float* sum_exp, float* target_logit, float* logits, const float* row_max,
                        const int32_t* targets, int64_t N, int V, int valid, int vocab_begin, bool store_exp);
void cross_entropy_finish(float* losses, float* dlogits, const float* row_max, const float* sum_exp,
                          const float* target_logit, const int32_t* targets, int64_t N, int V, int valid,
                          int vocab_begin, float scale);

// Mixture of Experts token movement (kernels/ops.h moe_permute …), row[a] < 0: dropped.
void moe_permute(float* send, const float* x, const int32_t* row, int64_t n_assignments, int k, int C);
void moe_permute_backward(float* dx, const float* dsend, const int32_t* row, int64_t N, int k, int C);
void moe_unpermute(float* y, const float* out, const int32_t* row, const float* gates, int64_t N, int k, int C);
void moe_unpermute_backward(float* dgates, float* dout, const float* dy, const float* out, const int32_t* row,
                            const float* gates, int64_t N, int k, int C);

double sum_squares(const float* x, int64_t n);
void scale_inplace(float* x, int64_t n, float factor);
bool all_finite(const float* x, int64_t n);
void zero_fill(void* x, size_t bytes);
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& st);
// The same, and param16 = the updated param rounded to p (bf16 | fp16) in the same pass
// (kernels/cpu/adamw.cpp [Note: fused 16-bit copy]).
void adamw_update(float* param, uint16_t* param16, Precision p, const float* grad, float* m, float* v, int64_t n,
                  const AdamWStep& st);
// The same two with bf16 moments: widened to float32, stored rounded (kernels/cpu/adamw.cpp
// [Note: 16-bit moments]).
void adamw_update(float* param, const float* grad, uint16_t* m, uint16_t* v, int64_t n, const AdamWStep& st);
void adamw_update(float* param, uint16_t* param16, Precision p, const float* grad, uint16_t* m, uint16_t* v, int64_t n,
                  const AdamWStep& st);

}  // namespace megatrain::cpu
