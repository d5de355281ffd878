// Every op, declared once: forward and backward side by side. Dispatch (ops.cpp) checks shapes,
// dtypes and devices, then calls cpu:: — or, on a CUDA stream, the device backend
// (kernels/cuda/backend.h, [Note: device backend seam]) — with plain pointers and sizes.
// Conventions: outputs first, then inputs, then options; the stream first of all.
// Backward ops `=` into input gradients and `+=` into parameter gradients
// (see [Note: grad accumulation] in model/gpt.h). An empty Tensor means "absent" (no bias, ...).
//
// [Note: bf16 activations] On a CPU stream the tensors marked "f32 | bf16" below may be bf16: the
// activations of mixed precision that a GEMM or attention reads (norm outputs, q/k/v, the attention
// output, the MLP's hidden tensors and the gradients fed to the GEMMs). The op widens them as it
// reads, computes in float32 as the float32 op does (statistics, softmax and sums included) and
// rounds each bf16 result once, so on bf16 inputs it gives the float32 op's result rounded. Tensors
// not marked (weights of norms, statistics, log-sum-exp, gradients flowing into float32 sums, the
// residual stream) are f32. CUDA streams take f32 only: the device kernels read and write float32.
#pragma once
#include <string>
#include <vector>

#include "kernels/device.h"
#include "kernels/rng.h"
#include "kernels/rope_frequencies.h"
#include "kernels/tensor.h"

namespace megatrain {

// ---- linear: out = inp · weightᵀ + bias (PyTorch layout: weight is (OC, C)) ----
// inp, weight, out and dout are f32 | bf16; bf16 ones need a bf16 stream (s.matmul), whose GEMMs
// read them as they are (on a CPU with a native bf16 GEMM, no conversion pass). A bf16 out is
// rounded from the float32 sums, bias included.
void matmul_forward(const Stream& s, Tensor out,  // (N, OC)
                    Tensor inp,                   // (N, C)
                    Tensor weight,                // (OC, C)
                    Tensor bias);                 // (OC) or empty
// Either gradient may be skipped (empty), so the input gradient can be computed and sent while the
// weight gradient is computed in a second call (model/linear.h).
void matmul_backward(const Stream& s, Tensor dinp,  // (N, C)   =, or empty
                     Tensor dweight,                // (OC, C)  +=, or empty
                     Tensor dbias,                  // (OC)     +=, or empty
                     Tensor dout,                   // (N, OC)
                     Tensor inp,                    // (N, C)
                     Tensor weight);                // (OC, C), may be empty when dinp is
// Bytes the linear layers hold for their 16-bit operands (bf16/fp16 streams; grow-only, reused),
// over every thread of the process.
int64_t matmul_scratch_bytes(const Stream& s);
// How the linear layers' GEMMs run on this stream's device and precision, for the start-up log.
std::string matmul_path(const Stream& s);

// ---- conversion: f32 → bf16 / f16 (round to nearest, ties to even; ±inf beyond the range) or
// bf16 / f16 → f32 (exact); out and in have the same element count ----
void convert(const Stream& s, Tensor out, Tensor in);

// ---- normalisation (eps inside the square root); the forward's out is f32 | bf16 ----
void layernorm_forward(const Stream& s, Tensor out,  // (N, C)
                       Tensor mean, Tensor rstd,     // (N), (N) saved for backward
                       Tensor inp,                   // (N, C)
                       Tensor weight, Tensor bias,   // (C), (C) or empty
                       float eps);
// dinp = dresidual + ∂loss/∂inp through the norm (dresidual may be empty: then just the latter).
void layernorm_backward(const Stream& s, Tensor dinp,  // (N, C)
                        Tensor dweight, Tensor dbias,  // (C) +=, (C) += or empty
                        Tensor dout,                   // (N, C)
                        Tensor dresidual,              // (N, C) or empty
                        Tensor inp, Tensor weight,     // (N, C), (C)
                        Tensor mean, Tensor rstd);     // (N), (N)
void rmsnorm_forward(const Stream& s, Tensor out,      // (N, C)
                     Tensor rstd,                      // (N)
                     Tensor inp, Tensor weight,        // (N, C), (C)
                     float eps);
void rmsnorm_backward(const Stream& s, Tensor dinp,   // (N, C)
                      Tensor dweight,                 // (C) +=
                      Tensor dout, Tensor dresidual,  // (N, C), (N, C) or empty
                      Tensor inp, Tensor weight,      // (N, C), (C)
                      Tensor rstd);                   // (N)

// ---- activations: inp, out and dinp f32 | bf16 (one dtype), dout f32 ----
// GELU, tanh approximation (GPT-2).
void gelu_forward(const Stream& s, Tensor out, Tensor inp);                 // (N), (N)
void gelu_backward(const Stream& s, Tensor dinp, Tensor dout, Tensor inp);  // (N) each
// SwiGLU: inp = [gate | up] along the last dim; out = silu(gate) * up.
void swiglu_forward(const Stream& s, Tensor out,    // (N, F)
                    Tensor inp);                    // (N, 2F)
void swiglu_backward(const Stream& s, Tensor dinp,  // (N, 2F)
                     Tensor dout,                   // (N, F)
                     Tensor inp);                   // (N, 2F)

// ---- rotary position embedding, Hugging Face Llama rotate-half convention, in place ----
// qkv rows hold [q heads | k heads | v heads]; only q and k rotate, at the frequencies of `freq`
// (kernels/rope_frequencies.h: the base θ and a context-extension scaling). Backward is the
// transpose: the rotation by −angle, times the same attention factor. qkv is f32 | bf16.
// Row t of each sequence is at position pos0 + t (pos0 > 0: incremental decoding with a KV cache).
enum class RopeDirection { forward, backward };
void rope_apply(const Stream& s, Tensor qkv,  // (B, T, (H + 2·Hkv)·D)
                int n_heads, int n_kv_heads, const RopeFrequencies& freq, RopeDirection dir, int pos0 = 0);

// ---- causal attention, block-wise with online softmax (flash-attention style) ----
// Which implementation the two ops below run on a CUDA stream (train.attention_backend; the
// device backend's set_attention, kernels/cuda/backend.h): flash, the float32 kernels of
// kernels/cuda/attention.cu; cudnn, cuDNN's fused attention on 16-bit copies of the tensors
// (kernels/cuda/cudnn_attention.h); automatic, cuDNN where the stream's precision is bf16 or fp16
// and cuDNN runs the shape, else flash. CPU streams run the CPU op whatever the choice.
enum class AttentionImpl : uint8_t { automatic, flash, cudnn };
// qkv as above; grouped-query when Hkv < H (query head h uses kv head h / (H / Hkv)). qkv, out and
// dqkv are f32 | bf16 (one dtype), dout and lse f32; the softmax is float32 either way.
// Document boundaries (several documents packed in a sequence): first_key, int32 (B, T), holds for
// each row the first row of its document — query t then sees keys [first_key[b, t], t] only, and key
// blocks before a query block's documents are skipped. Empty: one document per sequence. CPU streams only.
void attention_forward(const Stream& s, Tensor out,  // (B, T, H·D)
                       Tensor lse,                   // (B, H, T) log-sum-exp saved for backward
                       Tensor qkv,                   // (B, T, (H + 2·Hkv)·D)
                       int n_heads, int n_kv_heads, Tensor first_key = {});
void attention_backward(const Stream& s, Tensor dqkv,  // (B, T, (H + 2·Hkv)·D) =
                        Tensor dout,                   // (B, T, H·D)
                        Tensor qkv, Tensor out, Tensor lse, int n_heads, int n_kv_heads, Tensor first_key = {});
// ---- attention of one block of rows against another (context parallelism: model/ring_attention.h, model/ulysses_attention.h) ----
// Rows [t0, t0 + n) of every sequence of a float32 (B, T, width) tensor, head h at column col + h·D;
// a log-sum-exp tensor (B, H, T) goes with it, read and written at the same rows.
struct AttnRows {
  Tensor t;
  int64_t col = 0;
  int t0 = 0, n = 0;
};
struct AttnHeads {
  int n_heads, n_kv_heads, head_dim;
};
// out's rows (and lse's) ← q's rows attending to k's and v's; causal (as many rows at the same
// positions): key j is hidden from query i when j > i, else every key is seen. first_key (document
// boundaries; empty: none): int32 (B, T) at q's rows, like lse — query i sees no row of k's tensor
// before row first_key[b, q.t0 + i] of it; a row may see none of k's rows (out 0, lse −∞).
void attention_block_forward(const Stream& s, AttnRows out, Tensor lse, AttnRows q, AttnRows k, AttnRows v,
                             AttnHeads heads, bool causal, Tensor first_key = {});
// `+=` into dq, dk and dv from dout, with out and lse the final (merged) ones at q's rows.
void attention_block_backward(const Stream& s, AttnRows dq, AttnRows dk, AttnRows dv, AttnRows dout, AttnRows q,
                              AttnRows k, AttnRows v, AttnRows out, Tensor lse, AttnHeads heads, bool causal,
                              Tensor first_key = {});
// (out, lse) ← the softmax-weighted merge of (out, lse) with (part, part_lse): the attention over the
// union of the two key sets, from each set's attention (FlashAttention's rescaling by the LSE).
void attention_merge(const Stream& s, AttnRows out, Tensor lse, AttnRows part, Tensor part_lse, AttnHeads heads);
// dst's rows ← (or += with accumulate) src's rows, `width` columns from each view's col (equal row counts).
void attention_rows_copy(const Stream& s, AttnRows dst, AttnRows src, int64_t width, bool accumulate);
// Inference over a KV cache: n new query rows at positions [pos0, pos0 + n), whose keys and
// values are already in cache rows [pos0, pos0 + n); row i attends to cache rows 0 … pos0 + i.
void attention_decode_forward(const Stream& s, Tensor out,  // (n, H·D)
                              Tensor q,                     // (n, H·D), after RoPE
                              Tensor k_cache,               // (T_cache, Hkv·D), after RoPE
                              Tensor v_cache,               // (T_cache, Hkv·D)
                              int n_heads, int n_kv_heads, int pos0);

// ---- embeddings ----
// Token embedding of a vocabulary shard: wte holds rows [vocab_begin, vocab_begin + V) of the
// vocabulary; out[i] = that row of tokens[i], or zeros when another shard holds it.
void embedding_forward(const Stream& s, Tensor out,  // (N, C) =
                       Tensor tokens,                // (N) or (B, T) i32
                       Tensor wte,                   // (V, C)
                       int vocab_begin);
void embedding_backward(const Stream& s, Tensor dwte,  // (V, C) +=, rows of this shard only
                        Tensor dout,                   // (N, C)
                        Tensor tokens,                 // (N) or (B, T) i32
                        int vocab_begin);
// Learned positions: row i of out is at position (first_row + i) mod T (T = sequence length; rows
// of a micro-batch are sequences back to back, first_row > 0 for a shard of them or a decoding step).
void position_embedding_forward(const Stream& s, Tensor out,  // (n, C) +=
                                Tensor wpe,                   // (P, C), P ≥ T
                                int T, int64_t first_row);
void position_embedding_backward(const Stream& s, Tensor dwpe,  // (P, C) +=
                                 Tensor dout,                   // (n, C)
                                 int T, int64_t first_row);

// ---- elementwise ----
void add_forward(const Stream& s, Tensor out, Tensor a, Tensor b);  // out = a + b, (N) each
void copy(const Stream& s, Tensor out, Tensor inp);                 // out = inp, (N) each, f32 | bf16
// Between a tensor of the stream's device and host memory of tensor.bytes() bytes (a memcpy on
// CPU): copy_from_host may reuse `host` once it returns; copy_to_host returns once the bytes are in.
void copy_from_host(const Stream& s, Tensor out, const void* host);
void copy_to_host(const Stream& s, void* host, Tensor in);
// Inverted dropout in place: keep with probability 1 − p, scale kept values by 1/(1 − p).
// The mask is a pure function of (key, key.offset + element index), so backward regenerates it and
// a slice of a tensor given its first element's index as offset gets the slice of the whole mask.
void dropout_apply(const Stream& s, Tensor x, float p, const RngKey& key);

// ---- loss: softmax cross-entropy over a vocabulary split into column shards ----
// logits (N, V) hold vocabulary columns [vocab_begin, vocab_begin + V); the first `valid` are real
// words, the rest padding (excluded, zero gradient). losses[i] = −log softmax(all logits)[target[i]],
// in three steps so that tensor-parallel ranks can combine their shards between them (model/loss.h):
//   1. row_max = max over valid columns (−inf when valid = 0)          → max over shards
//   2. sum_exp = Σ exp(logit − row_max), target_logit (0 off-shard)    → sums over shards
//   3. losses = log(sum_exp) + row_max − target_logit
// With LossGrad::in_place, step 2 keeps the exponentials in the logits and step 3 turns them into
// (softmax − onehot) · dlogits_scale, saving a (N, V) gradient buffer.
// A negative target leaves its row out (a masked position: loss 0, gradient 0); kMaskedTarget is
// the one the data uses.
enum class LossGrad { none, in_place };
inline constexpr int32_t kMaskedTarget = -1;
void cross_entropy_max(const Stream& s, Tensor row_max,  // (N)
                       Tensor logits,                    // (N, V)
                       int valid);
void cross_entropy_sums(const Stream& s, Tensor sum_exp,  // (N)
                        Tensor target_logit,              // (N)
                        Tensor logits,                    // (N, V), exponentials if in_place
                        Tensor row_max,                   // (N) the global maxima
                        Tensor targets,                   // (N) i32
                        int vocab_begin, int valid, LossGrad grad);
void cross_entropy_finish(const Stream& s, Tensor losses,                       // (N)
                          Tensor logits,                                        // (N, V) → dlogits if in_place
                          Tensor row_max, Tensor sum_exp, Tensor target_logit,  // (N) each, global
                          Tensor targets,                                       // (N) i32
                          int vocab_begin, int valid, LossGrad grad, float dlogits_scale);

// ---- Mixture of Experts: tokens moved by a routing plan (model/moe.h) ----
// row (N, k) i32: where assignment a = t·k + j (token t's j-th expert) sits in the expert-ordered
// send buffer, −1 when capacity dropped it; gates (N, k) its combine weight. Rows of send / out
// that no assignment names are left as they are.
// send[row[a]] = x[t]; backward: dx[t] += Σ_j dsend[row[t·k + j]] over kept j.
void moe_permute(const Stream& s, Tensor send,         // (≥ N·k, C)
                 Tensor x,                             // (N, C)
                 Tensor row);                          // (N, k) i32
void moe_permute_backward(const Stream& s, Tensor dx,  // (N, C) +=
                          Tensor dsend,                // (≥ N·k, C)
                          Tensor row);                 // (N, k) i32
// The combine: y[t] = Σ_j gates[a] · out[row[a]] over kept j (0 for a token with none); backward:
// dgates[a] = ⟨dy[t], out[row[a]]⟩ (summed in double; 0 when dropped), dout[row[a]] = gates[a]·dy[t].
void moe_unpermute(const Stream& s, Tensor y,                // (N, C) =
                   Tensor out,                               // (≥ N·k, C)
                   Tensor row, Tensor gates);                // (N, k) i32, (N, k)
void moe_unpermute_backward(const Stream& s, Tensor dgates,  // (N, k) =
                            Tensor dout,                     // (≥ N·k, C): the kept rows =
                            Tensor dy, Tensor out,           // (N, C), (≥ N·k, C)
                            Tensor row, Tensor gates);       // (N, k) i32, (N, k)

// ---- optimizer primitives over flat ranges ----
double sum_squares(const Stream& s, Tensor x);  // Σ x² in double
// Σ x² over every tensor of the list, in double: on CUDA one launch (per 96 tensors) and one wait
// for the sum, not one per tensor (a rank's owned gradient ranges, model/tp_shared.h).
double sum_squares(const Stream& s, const std::vector<Tensor>& list);
// One float range (the device backend's form of a sum_squares list entry).
struct FloatRange {
  const float* data;
  int64_t n;
};
// Whether x holds no NaN or ±Inf (the gradient checks of mixed precision and robustness).
bool all_finite(const Stream& s, Tensor x);
// Every byte of x set to 0 (any dtype): a gradient buffer's start of a step.
void zero_fill(const Stream& s, Tensor x);
void scale_inplace(const Stream& s, Tensor x, float factor);
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1, bias_correction2;  // 1 − β₁ᵗ, 1 − β₂ᵗ
  float grad_scale;                          // multiply grads by this first (clipping)
};
// One range of AdamW's four arrays, n floats each (the device backend's form of an entry below).
struct AdamWRange {
  float* param;
  const float* grad;
  float* m;
  float* v;
  int64_t n;
};
// The four tensors of one AdamW entry, of equal element counts, on the stream's device, and
// optionally (CPU only) param16: a bf16 or f16 tensor of as many elements that receives the updated
// param rounded to it (convert's bits) in the same pass (kernels/cpu/adamw.cpp [Note: fused 16-bit
// copy]). A device rounds after the update instead (model/optimizer.cpp). The moments m and v are
// float32, or (CPU only) both bf16: widened, updated in float32, stored rounded ([Note: 16-bit
// moments] there).
struct AdamWTensors {
  Tensor param, grad, m, v;
  Tensor param16 = {};
};
// The update of every entry of `list` with the same step constants: on CUDA one multi-tensor
// kernel launch per 48 entries (kernels/cuda/adamw.cu), not one per tensor; on CPU each in turn.
void adamw_update(const Stream& s, const std::vector<AdamWTensors>& list, const AdamWStep& st);

}  // namespace megatrain
