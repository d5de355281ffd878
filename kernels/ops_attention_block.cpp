// Dispatch of the block attention ops (kernels/ops.h): views of rows of (B, T, width) tensors
// checked against their shapes, then the CPU kernels or the device backend's.
#include "kernels/cpu/cpu.h"
#include "kernels/ops_dispatch.h"

namespace megatrain {
namespace {

// The rows' view for the CPU kernels, after checking that `width` columns of every row lie inside
// the tensor; `n` rows expected (the block's).
template <typename F>
AttnView<F> rows_of(const AttnRows& r, int64_t width, int n, const char* name) {
  const Tensor& t = r.t;
  MT_CHECK(t.dtype == DType::f32 && t.shape.ndim == 3, "{} must be a float32 (B, T, width) tensor, got {} {}", name,
           dtype_name(t.dtype), t.shape.str());
  MT_CHECK(r.n == n && r.t0 >= 0 && r.t0 + r.n <= t.shape[1] && r.col >= 0 && r.col + width <= t.shape[2],
           "{}: rows [{}, {}) and columns [{}, {}) of {} (expected {} rows)", name, r.t0, r.t0 + r.n, r.col,
           r.col + width, t.shape.str(), n);
  const int64_t ld = t.shape[2];
  return {t.f32() + r.t0 * ld + r.col, ld, ld * t.shape[1]};
}

// lse's (B, H, T) element (b, h, t0).
float* lse_at(const Tensor& lse, const AttnRows& r, int H, const char* name) {
  const Tensor& t = r.t;
  MT_CHECK(lse.dtype == DType::f32 && lse.shape.ndim == 3 && lse.shape[0] == t.shape[0] && lse.shape[1] == H &&
               lse.shape[2] == t.shape[1],
           "{} must be float32 (B, H, T) = ({}, {}, {}), got {}", name, t.shape[0], H, t.shape[1], lse.shape.str());
  return lse.f32() + r.t0;
}

// The first visible keys of q's rows (kernels/ops.h attention_block_forward), checked; null when empty.
const int32_t* first_keys(DeviceBackend* dev, const Tensor& first_key, const AttnRows& q, const char* op) {
  if (first_key.data == nullptr) return nullptr;
  MT_CHECK(dev == nullptr,
           "{} with document boundaries (data.reset_attention_mask) runs on the CPU backend only: the CUDA "
           "kernels do not take them yet; set train.device = \"cpu\" or drop the option",
           op);
  MT_CHECK(first_key.dtype == DType::i32 && first_key.shape.ndim == 2 && first_key.shape[0] == q.t.shape[0] &&
               first_key.shape[1] == q.t.shape[1],
           "{}: first_key must be int32 (B, T) = ({}, {}), got {} {}", op, q.t.shape[0], q.t.shape[1],
           dtype_name(first_key.dtype), first_key.shape.str());
  return first_key.i32() + q.t0;
}

AttnBlock block(const AttnRows& q, const AttnRows& k, AttnHeads h, bool causal) {
  MT_CHECK(h.n_kv_heads >= 1 && h.n_heads % h.n_kv_heads == 0 && h.head_dim >= 1,
           "attention heads: n_heads {} must be a multiple of n_kv_heads {} (head_dim {})", h.n_heads, h.n_kv_heads,
           h.head_dim);
  MT_CHECK(q.t.shape[0] == k.t.shape[0], "q holds {} sequences, k {}", q.t.shape[0], k.t.shape[0]);
  return {static_cast<int>(q.t.shape[0]), q.n, k.n, h.n_heads, h.n_kv_heads, h.head_dim, causal, q.t.shape[1]};
}

}  // namespace

void attention_block_forward(const Stream& s, AttnRows out, Tensor lse, AttnRows q, AttnRows k, AttnRows v,
                             AttnHeads heads, bool causal, Tensor first_key) {
  DeviceBackend* dev = dispatch::backend_for(s, "attention_block_forward", {out.t, lse, q.t, k.t, v.t});
  AttnBlock d = block(q, k, heads, causal);
  d.first_key = first_keys(dev, first_key, q, "attention_block_forward");
  d.first_ld = q.t.shape[1];
  d.first_base = k.t0;
  const int64_t qw = int64_t{heads.n_heads} * heads.head_dim, kw = int64_t{heads.n_kv_heads} * heads.head_dim;
  MT_CHECK(out.t.shape[1] == q.t.shape[1], "out has {} rows per sequence, q {}", out.t.shape[1], q.t.shape[1]);
  float* l = lse_at(lse, out, heads.n_heads, "lse");
  d.lse_ld = lse.shape[2];
  const auto o = rows_of<float>(out, qw, d.Tq, "out");
  const auto qv = rows_of<const float>(q, qw, d.Tq, "q"), kv = rows_of<const float>(k, kw, d.Tk, "k"),
             vv = rows_of<const float>(v, kw, d.Tk, "v");
  if (dev) return dev->attention_block_forward(s, o, l, qv, kv, vv, d);
  cpu::attention_block_forward(o, l, qv, kv, vv, d);
}

void attention_block_backward(const Stream& s, AttnRows dq, AttnRows dk, AttnRows dv, AttnRows dout, AttnRows q,
                              AttnRows k, AttnRows v, AttnRows out, Tensor lse, AttnHeads heads, bool causal,
                              Tensor first_key) {
  DeviceBackend* dev =
      dispatch::backend_for(s, "attention_block_backward", {dq.t, dk.t, dv.t, dout.t, q.t, k.t, v.t, out.t, lse});
  AttnBlock d = block(q, k, heads, causal);
  d.first_key = first_keys(dev, first_key, q, "attention_block_backward");
  d.first_ld = q.t.shape[1];
  d.first_base = k.t0;
  const int64_t qw = int64_t{heads.n_heads} * heads.head_dim, kw = int64_t{heads.n_kv_heads} * heads.head_dim;
  const float* l = lse_at(lse, out, heads.n_heads, "lse");
  d.lse_ld = lse.shape[2];
  const auto gq = rows_of<float>(dq, qw, d.Tq, "dq"), gk = rows_of<float>(dk, kw, d.Tk, "dk"),
             gv = rows_of<float>(dv, kw, d.Tk, "dv");
  const auto g = rows_of<const float>(dout, qw, d.Tq, "dout"), qv = rows_of<const float>(q, qw, d.Tq, "q"),
             kv = rows_of<const float>(k, kw, d.Tk, "k"), vv = rows_of<const float>(v, kw, d.Tk, "v"),
             o = rows_of<const float>(out, qw, d.Tq, "out");
  if (dev) return dev->attention_block_backward(s, gq, gk, gv, g, qv, kv, vv, o, l, d);
  cpu::attention_block_backward(gq, gk, gv, g, qv, kv, vv, o, l, d);
}

void attention_merge(const Stream& s, AttnRows out, Tensor lse, AttnRows part, Tensor part_lse, AttnHeads heads) {
  DeviceBackend* dev = dispatch::backend_for(s, "attention_merge", {out.t, lse, part.t, part_lse});
  const int64_t w = int64_t{heads.n_heads} * heads.head_dim;
  MT_CHECK(lse.shape == part_lse.shape && out.t0 == part.t0,
           "attention_merge: lse {} and part_lse {} must have one shape, and out and part the same rows (t0 {} and {})",
           lse.shape.str(), part_lse.shape.str(), out.t0, part.t0);
  AttnBlock d = block(out, out, heads, false);
  float* l = lse_at(lse, out, heads.n_heads, "lse");
  const float* pl = lse_at(part_lse, part, heads.n_heads, "part_lse");
  d.lse_ld = lse.shape[2];
  const auto o = rows_of<float>(out, w, d.Tq, "out");
  const auto p = rows_of<const float>(part, w, d.Tq, "part");
  if (dev) return dev->attention_merge(s, o, l, p, pl, d);
  cpu::attention_merge(o, l, p, pl, d);
}

void attention_rows_copy(const Stream& s, AttnRows dst, AttnRows src, int64_t width, bool accumulate) {
  DeviceBackend* dev = dispatch::backend_for(s, "attention_rows_copy", {dst.t, src.t});
  MT_CHECK(dst.t.shape[0] == src.t.shape[0], "attention_rows_copy: {} sequences into {}", src.t.shape[0],
           dst.t.shape[0]);
  const AttnView<float> d = rows_of<float>(dst, width, src.n, "dst");
  const AttnView<const float> r = rows_of<const float>(src, width, src.n, "src");
  const int B = static_cast<int>(dst.t.shape[0]);
  if (dev) return dev->attention_rows_copy(s, d, r, B, src.n, width, accumulate);
  cpu::attention_rows_copy(d, r, B, src.n, width, accumulate);
}

}  // namespace megatrain
