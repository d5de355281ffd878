// Dispatch: checks shapes, dtypes and devices once, then calls the backend with plain pointers —
// cpu:: on a CPU stream, the device backend on a CUDA stream ([Note: device backend seam]).
// Linear layers, conversion, normalisation, activations, RoPE and attention; embeddings and the
// loss are in ops_vocab.cpp, elementwise and optimizer ops in ops_elementwise.cpp.
#include "kernels/ops.h"

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops_dispatch.h"

namespace megatrain {

using namespace dispatch;

namespace {
// An operand or result of the linear layers' GEMMs (cpu::matmul_*): f32, or bf16 on a bf16 stream
// (kernels/device.h: the GEMMs multiply the stream precision's roundings).
cpu::MatmulArg gemm_arg(const Stream& s, const Tensor& t, const char* name, int64_t numel) {
  expect_activation(s, t, name, numel);
  MT_CHECK(t.dtype == DType::f32 || s.matmul == Precision::bf16,
           "{} is bf16 but the stream's GEMMs multiply {}: bf16 operands need a bf16 stream", name,
           precision_name(s.matmul));
  return {t.data, t.dtype};
}
}  // namespace

void matmul_forward(const Stream& s, Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  DeviceBackend* dev = backend_for(s, "matmul_forward", {out, inp, weight, bias});
  const int64_t N = rows(inp);
  const int C = last(inp), OC = static_cast<int>(weight.shape[0]);
  const cpu::MatmulArg x = gemm_arg(s, inp, "inp", N * C), w = gemm_arg(s, weight, "weight", int64_t{OC} * C);
  gemm_arg(s, out, "out", N * OC);
  float* b = opt(bias, "bias", OC);
  if (dev) return dev->matmul_forward(s, out.f32(), inp.f32(), weight.f32(), b, N, C, OC);
  cpu::matmul_forward(out.data, out.dtype, x, w, b, N, C, OC, s.matmul);
}

void matmul_backward(const Stream& s, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                     Tensor weight) {
  DeviceBackend* dev = backend_for(s, "matmul_backward", {dinp, dweight, dbias, dout, inp, weight});
  const int64_t N = rows(inp);
  const int C = last(inp), OC = static_cast<int>((weight.data != nullptr ? weight : dweight).shape[0]);
  MT_CHECK(weight.data != nullptr || dinp.data == nullptr, "matmul_backward: dinp needs the weight");
  const cpu::MatmulArg dy = gemm_arg(s, dout, "dout", N * OC), x = gemm_arg(s, inp, "inp", N * C);
  const cpu::MatmulArg w =
      present(weight) ? gemm_arg(s, weight, "weight", int64_t{OC} * C) : cpu::MatmulArg{nullptr, DType::f32};
  float* di = opt(dinp, "dinp", N * C);
  float* dw = opt(dweight, "dweight", int64_t{OC} * C);
  float* db = opt(dbias, "dbias", OC);
  // On a CUDA stream every operand is f32 (expect_activation).
  if (dev)
    return dev->matmul_backward(s, di, dw, db, dout.f32(), inp.f32(), static_cast<const float*>(w.data), N, C, OC);
  cpu::matmul_backward(di, dw, db, dy, x, w, N, C, OC, s.matmul);
}

void convert(const Stream& s, Tensor out, Tensor in) {
  DeviceBackend* dev = backend_for(s, "convert", {out, in});
  MT_CHECK(out.numel() == in.numel(), "convert: {} elements into {}", in.numel(), out.numel());
  const auto precision = [](DType d) { return d == DType::bf16 ? Precision::bf16 : Precision::fp16; };
  if (dev && in.dtype == DType::f32)
    dev->f32_to_half(s, precision(out.dtype), out.half(), in.f32(), in.numel());
  else if (dev)
    dev->half_to_f32(s, precision(in.dtype), out.f32(), in.half(), in.numel());
  else if (in.dtype == DType::f32)
    cpu::f32_to_half(precision(out.dtype), out.half(), in.f32(), in.numel());
  else
    cpu::half_to_f32(precision(in.dtype), out.f32(), in.half(), in.numel());
}

int64_t matmul_scratch_bytes(const Stream& s) {
  if (DeviceBackend* dev = backend_for(s, "matmul_scratch_bytes", {})) return dev->matmul_scratch_bytes(s);
  return cpu::matmul_scratch_bytes();
}

std::string matmul_path(const Stream& s) {
  if (DeviceBackend* dev = backend_for(s, "matmul_path", {})) return dev->matmul_path(s);
  return s.matmul == Precision::fp32 ? "the float32 GEMM" : cpu::half_gemm_path(s.matmul);
}

void layernorm_forward(const Stream& s, Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                       float eps) {
  DeviceBackend* dev = backend_for(s, "layernorm_forward", {out, mean, rstd, inp, weight, bias});
  const int64_t N = rows(inp);
  const int C = last(inp);
  expect_activation(s, out, "out", N * C);
  expect_f32(mean, "mean", N);
  expect_f32(rstd, "rstd", N);
  expect_f32(weight, "weight", C);
  float* b = opt(bias, "bias", C);
  if (dev) return dev->layernorm_forward(s, out.f32(), mean.f32(), rstd.f32(), inp.f32(), weight.f32(), b, N, C, eps);
  if (out.dtype == DType::bf16)
    return cpu::layernorm_forward(bf16_data(out), mean.f32(), rstd.f32(), inp.f32(), weight.f32(), b, N, C, eps);
  cpu::layernorm_forward(out.f32(), mean.f32(), rstd.f32(), inp.f32(), weight.f32(), b, N, C, eps);
}

void layernorm_backward(const Stream& s, Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor dresidual,
                        Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  DeviceBackend* dev =
      backend_for(s, "layernorm_backward", {dinp, dweight, dbias, dout, dresidual, inp, weight, mean, rstd});
  const int64_t N = rows(inp);
  const int C = last(inp);
  expect_f32(dinp, "dinp", N * C);
  expect_f32(dout, "dout", N * C);
  expect_f32(dweight, "dweight", C);
  float* db = opt(dbias, "dbias", C);
  float* dr = opt(dresidual, "dresidual", N * C);
  if (dev)
    return dev->layernorm_backward(s, dinp.f32(), dweight.f32(), db, dout.f32(), dr, inp.f32(), weight.f32(),
                                   mean.f32(), rstd.f32(), N, C);
  cpu::layernorm_backward(dinp.f32(), dweight.f32(), db, dout.f32(), dr, inp.f32(), weight.f32(), mean.f32(),
                          rstd.f32(), N, C);
}

void rmsnorm_forward(const Stream& s, Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  DeviceBackend* dev = backend_for(s, "rmsnorm_forward", {out, rstd, inp, weight});
  const int64_t N = rows(inp);
  const int C = last(inp);
  expect_activation(s, out, "out", N * C);
  expect_f32(rstd, "rstd", N);
  expect_f32(weight, "weight", C);
  if (dev) return dev->rmsnorm_forward(s, out.f32(), rstd.f32(), inp.f32(), weight.f32(), N, C, eps);
  if (out.dtype == DType::bf16)
    return cpu::rmsnorm_forward(bf16_data(out), rstd.f32(), inp.f32(), weight.f32(), N, C, eps);
  cpu::rmsnorm_forward(out.f32(), rstd.f32(), inp.f32(), weight.f32(), N, C, eps);
}

void rmsnorm_backward(const Stream& s, Tensor dinp, Tensor dweight, Tensor dout, Tensor dresidual, Tensor inp,
                      Tensor weight, Tensor rstd) {
  DeviceBackend* dev = backend_for(s, "rmsnorm_backward", {dinp, dweight, dout, dresidual, inp, weight, rstd});
  const int64_t N = rows(inp);
  const int C = last(inp);
  expect_f32(dinp, "dinp", N * C);
  expect_f32(dout, "dout", N * C);
  expect_f32(dweight, "dweight", C);
  float* dr = opt(dresidual, "dresidual", N * C);
  if (dev)
    return dev->rmsnorm_backward(s, dinp.f32(), dweight.f32(), dout.f32(), dr, inp.f32(), weight.f32(), rstd.f32(), N,
                                 C);
  cpu::rmsnorm_backward(dinp.f32(), dweight.f32(), dout.f32(), dr, inp.f32(), weight.f32(), rstd.f32(), N, C);
}

void gelu_forward(const Stream& s, Tensor out, Tensor inp) {
  DeviceBackend* dev = backend_for(s, "gelu_forward", {out, inp});
  expect_activation(s, inp, "inp", inp.numel());
  expect_activation(s, out, "out", inp.numel());
  expect_same_dtype(out, "out", inp, "inp");
  if (dev) return dev->gelu_forward(s, out.f32(), inp.f32(), inp.numel());
  if (inp.dtype == DType::bf16) return cpu::gelu_forward(bf16_data(out), bf16_data(inp), inp.numel());
  cpu::gelu_forward(out.f32(), inp.f32(), inp.numel());
}

void gelu_backward(const Stream& s, Tensor dinp, Tensor dout, Tensor inp) {
  DeviceBackend* dev = backend_for(s, "gelu_backward", {dinp, dout, inp});
  expect_activation(s, inp, "inp", inp.numel());
  expect_activation(s, dinp, "dinp", inp.numel());
  expect_same_dtype(dinp, "dinp", inp, "inp");
  expect_f32(dout, "dout", inp.numel());
  if (dev) return dev->gelu_backward(s, dinp.f32(), dout.f32(), inp.f32(), inp.numel());
  if (inp.dtype == DType::bf16) return cpu::gelu_backward(bf16_data(dinp), dout.f32(), bf16_data(inp), inp.numel());
  cpu::gelu_backward(dinp.f32(), dout.f32(), inp.f32(), inp.numel());
}

void swiglu_forward(const Stream& s, Tensor out, Tensor inp) {
  DeviceBackend* dev = backend_for(s, "swiglu_forward", {out, inp});
  const int F = last(out);
  const int64_t N = rows(out);
  expect_activation(s, inp, "inp", N * 2 * F);
  expect_activation(s, out, "out", N * F);
  expect_same_dtype(out, "out", inp, "inp");
  if (dev) return dev->swiglu_forward(s, out.f32(), inp.f32(), N, F);
  if (inp.dtype == DType::bf16) return cpu::swiglu_forward(bf16_data(out), bf16_data(inp), N, F);
  cpu::swiglu_forward(out.f32(), inp.f32(), N, F);
}

void swiglu_backward(const Stream& s, Tensor dinp, Tensor dout, Tensor inp) {
  DeviceBackend* dev = backend_for(s, "swiglu_backward", {dinp, dout, inp});
  const int F = last(dout);
  const int64_t N = rows(dout);
  expect_activation(s, inp, "inp", N * 2 * F);
  expect_activation(s, dinp, "dinp", N * 2 * F);
  expect_same_dtype(dinp, "dinp", inp, "inp");
  expect_f32(dout, "dout", N * F);
  if (dev) return dev->swiglu_backward(s, dinp.f32(), dout.f32(), inp.f32(), N, F);
  if (inp.dtype == DType::bf16) return cpu::swiglu_backward(bf16_data(dinp), dout.f32(), bf16_data(inp), N, F);
  cpu::swiglu_backward(dinp.f32(), dout.f32(), inp.f32(), N, F);
}

void rope_apply(const Stream& s, Tensor qkv, int n_heads, int n_kv_heads, const RopeFrequencies& freq,
                RopeDirection dir, int pos0) {
  DeviceBackend* dev = backend_for(s, "rope_apply", {qkv});
  MT_CHECK(qkv.shape.ndim == 3, "qkv must be (B, T, (H + 2·Hkv)·D), got {}", qkv.shape.str());
  const int D = static_cast<int>(qkv.shape[2] / (n_heads + 2 * n_kv_heads));
  MT_CHECK(D % 2 == 0 && D <= 1024, "rope needs an even head_dim ≤ 1024, got {}", D);
  const int B = static_cast<int>(qkv.shape[0]), T = static_cast<int>(qkv.shape[1]);
  expect_activation(s, qkv, "qkv", qkv.numel());
  if (dev) return dev->rope_apply(s, qkv.f32(), B, T, n_heads, n_kv_heads, D, freq, dir, pos0);
  const bool inverse = dir == RopeDirection::backward;
  if (qkv.dtype == DType::bf16)
    return cpu::rope_apply(bf16_data(qkv), B, T, n_heads, n_kv_heads, D, freq, inverse, pos0);
  cpu::rope_apply(qkv.f32(), B, T, n_heads, n_kv_heads, D, freq, inverse, pos0);
}

namespace {
cpu::AttnDims attn_dims(const Tensor& qkv, int H, int Hkv) {
  MT_CHECK(qkv.shape.ndim == 3, "qkv must be (B, T, (H + 2·Hkv)·D), got {}", qkv.shape.str());
  MT_CHECK(H % Hkv == 0, "n_heads {} must be a multiple of n_kv_heads {}", H, Hkv);
  const int D = static_cast<int>(qkv.shape[2] / (H + 2 * Hkv));
  MT_CHECK(D * (H + 2 * Hkv) == qkv.shape[2], "qkv last dim {} is not (H + 2·Hkv)·D", qkv.shape[2]);
  return {static_cast<int>(qkv.shape[0]), static_cast<int>(qkv.shape[1]), H, Hkv, D};
}

// The (B, T) int32 first visible keys of document-masked attention, checked; null when empty.
const int32_t* first_keys(DeviceBackend* dev, const Tensor& first_key, const cpu::AttnDims& d, const char* op) {
  if (first_key.data == nullptr) return nullptr;
  MT_CHECK(dev == nullptr,
           "{} with document boundaries (data.reset_attention_mask) runs on the CPU backend only: the CUDA "
           "flash and cuDNN kernels do not take them yet; set train.device = \"cpu\" or drop the option",
           op);
  MT_CHECK(first_key.dtype == DType::i32 && first_key.shape.ndim == 2 && first_key.shape[0] == d.B &&
               first_key.shape[1] == d.T,
           "{}: first_key must be int32 (B, T) = ({}, {}), got {} {}", op, d.B, d.T, dtype_name(first_key.dtype),
           first_key.shape.str());
  return first_key.i32();
}
}  // namespace

void attention_forward(const Stream& s, Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads,
                       Tensor first_key) {
  DeviceBackend* dev = backend_for(s, "attention_forward", {out, lse, qkv});
  auto d = attn_dims(qkv, n_heads, n_kv_heads);
  d.first_key = first_keys(dev, first_key, d, "attention_forward");
  expect_activation(s, qkv, "qkv", qkv.numel());
  expect_activation(s, out, "out", static_cast<int64_t>(d.B) * d.T * d.H * d.D);
  expect_same_dtype(out, "out", qkv, "qkv");
  expect_f32(lse, "lse", static_cast<int64_t>(d.B) * d.H * d.T);
  if (dev) return dev->attention_forward(s, out.f32(), lse.f32(), qkv.f32(), d.B, d.T, d.H, d.Hkv, d.D);
  if (qkv.dtype == DType::bf16) return cpu::attention_forward(bf16_data(out), lse.f32(), bf16_data(qkv), d);
  cpu::attention_forward(out.f32(), lse.f32(), qkv.f32(), d);
}

void attention_backward(const Stream& s, Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_heads,
                        int n_kv_heads, Tensor first_key) {
  DeviceBackend* dev = backend_for(s, "attention_backward", {dqkv, dout, qkv, out, lse});
  auto d = attn_dims(qkv, n_heads, n_kv_heads);
  d.first_key = first_keys(dev, first_key, d, "attention_backward");
  expect_activation(s, qkv, "qkv", qkv.numel());
  expect_activation(s, dqkv, "dqkv", qkv.numel());
  expect_activation(s, out, "out", static_cast<int64_t>(d.B) * d.T * d.H * d.D);
  expect_same_dtype(dqkv, "dqkv", qkv, "qkv");
  expect_same_dtype(out, "out", qkv, "qkv");
  expect_f32(dout, "dout", out.numel());
  expect_f32(lse, "lse", static_cast<int64_t>(d.B) * d.H * d.T);
  if (dev)
    return dev->attention_backward(s, dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(), d.B, d.T, d.H, d.Hkv,
                                   d.D);
  if (qkv.dtype == DType::bf16)
    return cpu::attention_backward(bf16_data(dqkv), dout.f32(), bf16_data(qkv), bf16_data(out), lse.f32(), d);
  cpu::attention_backward(dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(), d);
}

void attention_decode_forward(const Stream& s, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, int n_heads,
                              int n_kv_heads, int pos0) {
  MT_CHECK(backend_for(s, "attention_decode_forward", {out, q, k_cache, v_cache}) == nullptr,
           "attention_decode_forward has no CUDA kernel: decode with the KV cache on a CPU stream");
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

}  // namespace megatrain
