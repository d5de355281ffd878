// Dispatch: checks shapes, dtypes and devices once, then calls the backend with plain pointers.
#include "kernels/ops.h"

#include <cstring>
#include <initializer_list>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"

namespace megatrain {
namespace {

bool present(const Tensor& t) { return t.data != nullptr; }

void on_cpu(const Stream& s) {
  MT_CHECK(s.device == Device::cpu, "this build has only the CPU backend (configure with -DMEGATRAIN_CUDA=ON)");
}

void expect_f32(const Tensor& t, const char* name, int64_t numel) {
  MT_CHECK(t.dtype == DType::f32, "{} must be f32, got {}", name, dtype_name(t.dtype));
  MT_CHECK(t.numel() == numel, "{} has shape {} ({} elements), expected {} elements", name, t.shape.str(),
           t.numel(), numel);
}

float* opt(const Tensor& t, const char* name, int64_t numel) {
  if (!present(t)) return nullptr;
  expect_f32(t, name, numel);
  return t.f32();
}

int64_t rows(const Tensor& t) { return t.numel() / t.shape[t.shape.ndim - 1]; }
int last(const Tensor& t) { return static_cast<int>(t.shape[t.shape.ndim - 1]); }

}  // namespace

void matmul_forward(const Stream& s, Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  on_cpu(s);
  const int64_t N = rows(inp);
  const int C = last(inp), OC = static_cast<int>(weight.shape[0]);
  expect_f32(weight, "weight", static_cast<int64_t>(OC) * C);
  expect_f32(out, "out", N * OC);
  cpu::matmul_forward(out.f32(), inp.f32(), weight.f32(), opt(bias, "bias", OC), N, C, OC, s.matmul);
}

void matmul_backward(const Stream& s, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                     Tensor weight) {
  on_cpu(s);
  const int64_t N = rows(inp);
  const int C = last(inp), OC = static_cast<int>((weight.data != nullptr ? weight : dweight).shape[0]);
  expect_f32(dout, "dout", N * OC);
  MT_CHECK(weight.data != nullptr || dinp.data == nullptr, "matmul_backward: dinp needs the weight");
  cpu::matmul_backward(opt(dinp, "dinp", N * C), opt(dweight, "dweight", static_cast<int64_t>(OC) * C),
                       opt(dbias, "dbias", OC), dout.f32(), inp.f32(), opt(weight, "weight", int64_t{OC} * C), N, C, OC,
                       s.matmul);
}

void convert(const Stream& s, Tensor out, Tensor in) {
  on_cpu(s);
  MT_CHECK(out.numel() == in.numel(), "convert: {} elements into {}", in.numel(), out.numel());
  const auto precision = [](DType d) { return d == DType::bf16 ? Precision::bf16 : Precision::fp16; };
  if (in.dtype == DType::f32)
    cpu::f32_to_half(precision(out.dtype), out.half(), in.f32(), in.numel());
  else
    cpu::half_to_f32(precision(in.dtype), out.f32(), in.half(), in.numel());
}

int64_t matmul_scratch_bytes(const Stream& s) {
  on_cpu(s);
  return cpu::matmul_scratch_bytes();
}

std::string matmul_path(const Stream& s) {
  on_cpu(s);
  return s.matmul == Precision::fp32 ? "the float32 GEMM" : cpu::half_gemm_path(s.matmul);
}

void layernorm_forward(const Stream& s, Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                       Tensor bias, float eps) {
  on_cpu(s);
  const int64_t N = rows(inp);
  const int C = last(inp);
  expect_f32(out, "out", N * C);
  expect_f32(mean, "mean", N);
  expect_f32(rstd, "rstd", N);
  expect_f32(weight, "weight", C);
  cpu::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), inp.f32(), weight.f32(), opt(bias, "bias", C), N, C,
                         eps);
}

void layernorm_backward(const Stream& s, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor dresidual,
                        Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  on_cpu(s);
  const int64_t N = rows(inp);
  const int C = last(inp);
  expect_f32(dinp, "dinp", N * C);
  expect_f32(dout, "dout", N * C);
  expect_f32(dweight, "dweight", C);
  cpu::layernorm_backward(dinp.f32(), dweight.f32(), opt(dbias, "dbias", C), dout.f32(),
                          opt(dresidual, "dresidual", N * C), inp.f32(), weight.f32(), mean.f32(), rstd.f32(), N, C);
}

void rmsnorm_forward(const Stream& s, Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  on_cpu(s);
  const int64_t N = rows(inp);
  const int C = last(inp);
  expect_f32(out, "out", N * C);
  expect_f32(rstd, "rstd", N);
  expect_f32(weight, "weight", C);
  cpu::rmsnorm_forward(out.f32(), rstd.f32(), inp.f32(), weight.f32(), N, C, eps);
}

void rmsnorm_backward(const Stream& s, Tensor dinp, Tensor dweight, Tensor dout, Tensor dresidual, Tensor inp,
                      Tensor weight, Tensor rstd) {
  on_cpu(s);
  const int64_t N = rows(inp);
  const int C = last(inp);
  expect_f32(dinp, "dinp", N * C);
  expect_f32(dout, "dout", N * C);
  expect_f32(dweight, "dweight", C);
  cpu::rmsnorm_backward(dinp.f32(), dweight.f32(), dout.f32(), opt(dresidual, "dresidual", N * C), inp.f32(),
                        weight.f32(), rstd.f32(), N, C);
}

void gelu_forward(const Stream& s, Tensor out, Tensor inp) {
  on_cpu(s);
  expect_f32(out, "out", inp.numel());
  cpu::gelu_forward(out.f32(), inp.f32(), inp.numel());
}

void gelu_backward(const Stream& s, Tensor dinp, Tensor dout, Tensor inp) {
  on_cpu(s);
  expect_f32(dinp, "dinp", inp.numel());
  expect_f32(dout, "dout", inp.numel());
  cpu::gelu_backward(dinp.f32(), dout.f32(), inp.f32(), inp.numel());
}

void swiglu_forward(const Stream& s, Tensor out, Tensor inp) {
  on_cpu(s);
  const int F = last(out);
  const int64_t N = rows(out);
  expect_f32(inp, "inp", N * 2 * F);
  cpu::swiglu_forward(out.f32(), inp.f32(), N, F);
}

void swiglu_backward(const Stream& s, Tensor dinp, Tensor dout, Tensor inp) {
  on_cpu(s);
  const int F = last(dout);
  const int64_t N = rows(dout);
  expect_f32(inp, "inp", N * 2 * F);
  expect_f32(dinp, "dinp", N * 2 * F);
  cpu::swiglu_backward(dinp.f32(), dout.f32(), inp.f32(), N, F);
}

void rope_apply(const Stream& s, Tensor qkv, int n_heads, int n_kv_heads, float theta, RopeDirection dir, int pos0) {
  on_cpu(s);
  MT_CHECK(qkv.shape.ndim == 3, "qkv must be (B, T, (H + 2·Hkv)·D), got {}", qkv.shape.str());
  const int D = static_cast<int>(qkv.shape[2] / (n_heads + 2 * n_kv_heads));
  MT_CHECK(D % 2 == 0 && D <= 1024, "rope needs an even head_dim ≤ 1024, got {}", D);
  cpu::rope_apply(qkv.f32(), static_cast<int>(qkv.shape[0]), static_cast<int>(qkv.shape[1]), n_heads, n_kv_heads, D,
                  theta, dir == RopeDirection::backward, pos0);
}

namespace {
cpu::AttnDims attn_dims(const Tensor& qkv, int H, int Hkv) {
  MT_CHECK(qkv.shape.ndim == 3, "qkv must be (B, T, (H + 2·Hkv)·D), got {}", qkv.shape.str());
  MT_CHECK(H % Hkv == 0, "n_heads {} must be a multiple of n_kv_heads {}", H, Hkv);
  const int D = static_cast<int>(qkv.shape[2] / (H + 2 * Hkv));
  MT_CHECK(D * (H + 2 * Hkv) == qkv.shape[2], "qkv last dim {} is not (H + 2·Hkv)·D", qkv.shape[2]);
  return {static_cast<int>(qkv.shape[0]), static_cast<int>(qkv.shape[1]), H, Hkv, D};
}
}  // namespace

void attention_forward(const Stream& s, Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads) {
  on_cpu(s);
  const auto d = attn_dims(qkv, n_heads, n_kv_heads);
  expect_f32(out, "out", static_cast<int64_t>(d.B) * d.T * d.H * d.D);
  expect_f32(lse, "lse", static_cast<int64_t>(d.B) * d.H * d.T);
  cpu::attention_forward(out.f32(), lse.f32(), qkv.f32(), d);
}

void attention_backward(const Stream& s, Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_heads,
                        int n_kv_heads) {
  on_cpu(s);
  const auto d = attn_dims(qkv, n_heads, n_kv_heads);
  expect_f32(dqkv, "dqkv", qkv.numel());
  expect_f32(dout, "dout", out.numel());
  cpu::attention_backward(dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(), d);
}

void attention_decode_forward(const Stream& s, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, int n_heads,
                              int n_kv_heads, int pos0) {
  on_cpu(s);
  MT_CHECK(q.shape.ndim == 2 && k_cache.shape.ndim == 2,
           "q must be (n, H·D) and k_cache (T_cache, Hkv·D), got {} and {}", q.shape.str(), k_cache.shape.str());
  MT_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "n_heads {} must be a multiple of n_kv_heads {}", n_heads,
           n_kv_heads);
  const int n = static_cast<int>(q.shape[0]);
  const int D = static_cast<int>(q.shape[1] / n_heads);
  const int T_cache = static_cast<int>(k_cache.shape[0]);
  MT_CHECK(static_cast<int64_t>(D) * n_heads == q.shape[1], "q last dim {} is not H·D with H = {}", q.shape[1],
           n_heads);
  MT_CHECK(pos0 >= 0 && pos0 + n <= T_cache, "positions [{}, {}) exceed the KV cache's {} rows", pos0, pos0 + n,
           T_cache);
  expect_f32(k_cache, "k_cache", static_cast<int64_t>(T_cache) * n_kv_heads * D);
  expect_f32(v_cache, "v_cache", static_cast<int64_t>(T_cache) * n_kv_heads * D);
  expect_f32(out, "out", q.numel());
  cpu::attention_decode_forward(out.f32(), q.f32(), k_cache.f32(), v_cache.f32(), n, pos0,
                                cpu::AttnDims{1, T_cache, n_heads, n_kv_heads, D});
}

void embedding_forward(const Stream& s, Tensor out, Tensor tokens, Tensor wte, int vocab_begin) {
  on_cpu(s);
  const int V = static_cast<int>(wte.shape[0]), C = static_cast<int>(wte.shape[1]);
  expect_f32(out, "out", tokens.numel() * C);
  cpu::embedding_forward(out.f32(), tokens.i32(), wte.f32(), tokens.numel(), V, C, vocab_begin);
}

void embedding_backward(const Stream& s, Tensor dwte, Tensor dout, Tensor tokens, int vocab_begin) {
  on_cpu(s);
  const int V = static_cast<int>(dwte.shape[0]), C = static_cast<int>(dwte.shape[1]);
  expect_f32(dout, "dout", tokens.numel() * C);
  cpu::embedding_backward(dwte.f32(), dout.f32(), tokens.i32(), tokens.numel(), V, C, vocab_begin);
}

namespace {
// A position table (P, C) for rows at positions (first_row + i) mod T.
void check_positions(Tensor table, int C, int T, int64_t first_row, const char* name) {
  MT_CHECK(T >= 1 && table.shape[0] >= T && last(table) == C && first_row >= 0,
           "position embedding: T = {} and first_row = {} need T <= {} rows ({}) and width {}", T, first_row, name,
           table.shape[0], C);
}
}  // namespace

void position_embedding_forward(const Stream& s, Tensor out, Tensor wpe, int T, int64_t first_row) {
  on_cpu(s);
  check_positions(wpe, last(out), T, first_row, "wpe");
  cpu::position_embedding_forward(out.f32(), wpe.f32(), rows(out), last(out), T, first_row);
}

void position_embedding_backward(const Stream& s, Tensor dwpe, Tensor dout, int T, int64_t first_row) {
  on_cpu(s);
  check_positions(dwpe, last(dout), T, first_row, "dwpe");
  cpu::position_embedding_backward(dwpe.f32(), dout.f32(), rows(dout), last(dout), T, first_row);
}

void add_forward(const Stream& s, Tensor out, Tensor a, Tensor b) {
  on_cpu(s);
  expect_f32(a, "a", out.numel());
  expect_f32(b, "b", out.numel());
  cpu::add_forward(out.f32(), a.f32(), b.f32(), out.numel());
}

void copy(const Stream& s, Tensor out, Tensor inp) {
  on_cpu(s);
  expect_f32(out, "out", inp.numel());
  std::memcpy(out.f32(), inp.f32(), inp.bytes());
}

void dropout_apply(const Stream& s, Tensor x, float p, const RngKey& key) {
  on_cpu(s);
  MT_CHECK(p >= 0.0f && p < 1.0f, "dropout probability {} outside [0, 1)", p);
  if (p > 0.0f) cpu::dropout_apply(x.f32(), x.numel(), p, key);
}

namespace {
void check_loss_rows(Tensor logits, Tensor targets, int valid, std::initializer_list<Tensor> per_row) {
  MT_CHECK(valid >= 0 && valid <= last(logits), "{} valid columns of {} logits", valid, last(logits));
  const int64_t N = rows(logits);
  MT_CHECK(targets.numel() == N, "targets has {} elements, expected {}", targets.numel(), N);
  for (const Tensor& t : per_row) expect_f32(t, "per-row loss statistic", N);
}
}  // namespace

void cross_entropy_max(const Stream& s, Tensor row_max, Tensor logits, int valid) {
  on_cpu(s);
  MT_CHECK(valid >= 0 && valid <= last(logits), "{} valid columns of {} logits", valid, last(logits));
  expect_f32(row_max, "row_max", rows(logits));
  cpu::cross_entropy_max(row_max.f32(), logits.f32(), rows(logits), last(logits), valid);
}

void cross_entropy_sums(const Stream& s, Tensor sum_exp, Tensor target_logit, Tensor logits, Tensor row_max,
                        Tensor targets, int vocab_begin, int valid, LossGrad grad) {
  on_cpu(s);
  check_loss_rows(logits, targets, valid, {sum_exp, target_logit, row_max});
  cpu::cross_entropy_sums(sum_exp.f32(), target_logit.f32(), logits.f32(), row_max.f32(), targets.i32(),
                          rows(logits), last(logits), valid, vocab_begin, grad == LossGrad::in_place);
}

void cross_entropy_finish(const Stream& s, Tensor losses, Tensor logits, Tensor row_max, Tensor sum_exp,
                          Tensor target_logit, Tensor targets, int vocab_begin, int valid, LossGrad grad,
                          float dlogits_scale) {
  on_cpu(s);
  check_loss_rows(logits, targets, valid, {losses, row_max, sum_exp, target_logit});
  cpu::cross_entropy_finish(losses.f32(), grad == LossGrad::in_place ? logits.f32() : nullptr, row_max.f32(),
                            sum_exp.f32(), target_logit.f32(), targets.i32(), rows(logits), last(logits), valid,
                            vocab_begin, dlogits_scale);
}

double sum_squares(const Stream& s, Tensor x) {
  on_cpu(s);
  return cpu::sum_squares(x.f32(), x.numel());
}

void scale_inplace(const Stream& s, Tensor x, float factor) {
  on_cpu(s);
  cpu::scale_inplace(x.f32(), x.numel(), factor);
}

void adamw_update(const Stream& s, Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& st) {
  on_cpu(s);
  const int64_t n = param.numel();
  expect_f32(grad, "grad", n);
  expect_f32(m, "exp_avg", n);
  expect_f32(v, "exp_avg_sq", n);
  cpu::adamw_update(param.f32(), grad.f32(), m.f32(), v.f32(), n, st);
}

}  // namespace megatrain
