// Dispatch of the Mixture of Experts token-movement ops (see ops.cpp for the pattern).
#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"
#include "kernels/ops_dispatch.h"

namespace megatrain {

using namespace dispatch;

namespace {

// The plan's (N, k) and the rows' width C, checked against the send-ordered buffer's rows.
struct Plan {
  int64_t N;
  int k, C;
};
Plan plan_of(const char* op, Tensor row, Tensor tokens, Tensor sent) {
  MT_CHECK(row.dtype == DType::i32 && row.shape.ndim == 2, "{}: row must be (N, k) i32, got {} {}", op,
           dtype_name(row.dtype), row.shape.str());
  const Plan p{row.shape[0], static_cast<int>(row.shape[1]), last(tokens)};
  expect_f32(tokens, "the token rows", p.N * p.C);
  MT_CHECK(sent.dtype == DType::f32 && last(sent) == p.C && rows(sent) >= p.N * p.k,
           "{}: the send-ordered rows must be f32 (≥ {}, {}), got {} {}", op, p.N * p.k, p.C, dtype_name(sent.dtype),
           sent.shape.str());
  return p;
}

}  // namespace

void moe_permute(const Stream& s, Tensor send, Tensor x, Tensor row) {
  DeviceBackend* dev = backend_for(s, "moe_permute", {send, x, row});
  const Plan p = plan_of("moe_permute", row, x, send);
  if (dev) return dev->moe_permute(s, send.f32(), x.f32(), row.i32(), p.N, p.k, p.C);
  cpu::moe_permute(send.f32(), x.f32(), row.i32(), p.N * p.k, p.k, p.C);
}

void moe_permute_backward(const Stream& s, Tensor dx, Tensor dsend, Tensor row) {
  DeviceBackend* dev = backend_for(s, "moe_permute_backward", {dx, dsend, row});
  const Plan p = plan_of("moe_permute_backward", row, dx, dsend);
  if (dev) return dev->moe_permute_backward(s, dx.f32(), dsend.f32(), row.i32(), p.N, p.k, p.C);
  cpu::moe_permute_backward(dx.f32(), dsend.f32(), row.i32(), p.N, p.k, p.C);
}

void moe_unpermute(const Stream& s, Tensor y, Tensor out, Tensor row, Tensor gates) {
  DeviceBackend* dev = backend_for(s, "moe_unpermute", {y, out, row, gates});
  const Plan p = plan_of("moe_unpermute", row, y, out);
  expect_f32(gates, "gates", p.N * p.k);
  if (dev) return dev->moe_unpermute(s, y.f32(), out.f32(), row.i32(), gates.f32(), p.N, p.k, p.C);
  cpu::moe_unpermute(y.f32(), out.f32(), row.i32(), gates.f32(), p.N, p.k, p.C);
}

void moe_unpermute_backward(const Stream& s, Tensor dgates, Tensor dout, Tensor dy, Tensor out, Tensor row,
                            Tensor gates) {
  DeviceBackend* dev = backend_for(s, "moe_unpermute_backward", {dgates, dout, dy, out, row, gates});
  const Plan p = plan_of("moe_unpermute_backward", row, dy, out);
  MT_CHECK(dout.dtype == DType::f32 && dout.shape == out.shape,
           "moe_unpermute_backward: dout must be like out {}, got {}", out.shape.str(), dout.shape.str());
  expect_f32(dgates, "dgates", p.N * p.k);
  expect_f32(gates, "gates", p.N * p.k);
  if (dev)
    return dev->moe_unpermute_backward(s, dgates.f32(), dout.f32(), dy.f32(), out.f32(), row.i32(), gates.f32(), p.N,
                                       p.k, p.C);
  cpu::moe_unpermute_backward(dgates.f32(), dout.f32(), dy.f32(), out.f32(), row.i32(), gates.f32(), p.N, p.k, p.C);
}

}  // namespace megatrain
