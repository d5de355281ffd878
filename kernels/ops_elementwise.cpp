// Dispatch of the elementwise ops and the optimizer's primitives over flat ranges (see ops.cpp for
// the pattern).
#include <array>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"
#include "kernels/ops_dispatch.h"

namespace megatrain {

using namespace dispatch;

void add_forward(const Stream& s, Tensor out, Tensor a, Tensor b) {
  DeviceBackend* dev = backend_for(s, "add_forward", {out, a, b});
  expect_f32(a, "a", out.numel());
  expect_f32(b, "b", out.numel());
  if (dev) return dev->add_forward(s, out.f32(), a.f32(), b.f32(), out.numel());
  cpu::add_forward(out.f32(), a.f32(), b.f32(), out.numel());
}

void copy(const Stream& s, Tensor out, Tensor inp) {
  DeviceBackend* dev = backend_for(s, "copy", {out, inp});
  expect_activation(s, inp, "inp", inp.numel());
  expect_activation(s, out, "out", inp.numel());
  expect_same_dtype(out, "out", inp, "inp");
  if (dev) return dev->copy(s, out.f32(), inp.f32(), inp.numel());
  std::memcpy(out.data, inp.data, inp.bytes());
}

void copy_from_host(const Stream& s, Tensor out, const void* host) {
  DeviceBackend* dev = backend_for(s, "copy_from_host", {out});
  if (dev) return dev->copy_to_device(s, out.data, host, out.bytes());
  std::memcpy(out.data, host, out.bytes());
}

void copy_to_host(const Stream& s, void* host, Tensor in) {
  DeviceBackend* dev = backend_for(s, "copy_to_host", {in});
  if (dev) return dev->copy_to_host(s, host, in.data, in.bytes());
  std::memcpy(host, in.data, in.bytes());
}

void dropout_apply(const Stream& s, Tensor x, float p, const RngKey& key) {
  DeviceBackend* dev = backend_for(s, "dropout_apply", {x});
  MT_CHECK(p >= 0.0f && p < 1.0f, "dropout probability {} outside [0, 1)", p);
  if (p == 0.0f) return;
  if (dev) return dev->dropout_apply(s, x.f32(), x.numel(), p, key);
  cpu::dropout_apply(x.f32(), x.numel(), p, key);
}

double sum_squares(const Stream& s, Tensor x) { return sum_squares(s, std::vector<Tensor>{x}); }

double sum_squares(const Stream& s, const std::vector<Tensor>& list) {
  DeviceBackend* dev = backend_for(s, "sum_squares", {});
  std::vector<FloatRange> ranges;
  double sum = 0.0;
  for (const Tensor& x : list) {
    backend_for(s, "sum_squares", {x});
    expect_f32(x, "sum_squares: a tensor of the list", x.numel());
    if (dev)
      ranges.push_back(FloatRange{x.f32(), x.numel()});
    else
      sum += cpu::sum_squares(x.f32(), x.numel());
  }
  return dev ? dev->sum_squares(s, ranges.data(), static_cast<int>(ranges.size())) : sum;
}

bool all_finite(const Stream& s, Tensor x) {
  if (DeviceBackend* dev = backend_for(s, "all_finite", {x})) return dev->all_finite(s, x.f32(), x.numel());
  return cpu::all_finite(x.f32(), x.numel());
}

void zero_fill(const Stream& s, Tensor x) {
  if (DeviceBackend* dev = backend_for(s, "zero_fill", {x})) return dev->memset(s, x.data, 0, x.bytes());
  cpu::zero_fill(x.data, x.bytes());
}

void scale_inplace(const Stream& s, Tensor x, float factor) {
  DeviceBackend* dev = backend_for(s, "scale_inplace", {x});
  if (dev) return dev->scale_inplace(s, x.f32(), x.numel(), factor);
  cpu::scale_inplace(x.f32(), x.numel(), factor);
}

void adamw_update(const Stream& s, const std::vector<AdamWTensors>& list, const AdamWStep& st) {
  constexpr size_t kBatch = 64;  // entries handed to the backend per call, from the stack
  std::array<AdamWRange, kBatch> ranges{};
  size_t count = 0;
  DeviceBackend* dev = nullptr;
  const auto flush = [&] {
    if (dev && count > 0) dev->adamw_update(s, ranges.data(), static_cast<int>(count), st);
    count = 0;
  };
  for (const AdamWTensors& e : list) {
    dev = backend_for(s, "adamw_update", {e.param, e.grad, e.m, e.v});
    const int64_t n = e.param.numel();
    expect_f32(e.param, "param", n);
    expect_f32(e.grad, "grad", n);
    const bool bf16_moments = e.m.dtype == DType::bf16;
    MT_CHECK(
        e.m.dtype == e.v.dtype && (bf16_moments || e.m.dtype == DType::f32) && e.m.numel() == n && e.v.numel() == n,
        "adamw_update: exp_avg and exp_avg_sq must both be f32 or both bf16 of the param's {} elements, are {} "
        "of {} and {} of {}",
        n, dtype_name(e.m.dtype), e.m.numel(), dtype_name(e.v.dtype), e.v.numel());
    MT_CHECK(e.param16.data == nullptr || !dev,
             "adamw_update: the 16-bit copy in the same pass is a CPU path; on a device, convert after the update "
             "(model/optimizer.cpp)");
    MT_CHECK(!bf16_moments || !dev,
             "adamw_update: bf16 moments are a CPU path so far (config refuses them on a "
             "device)");
    if (e.param16.data != nullptr) {
      MT_CHECK((e.param16.dtype == DType::bf16 || e.param16.dtype == DType::f16) && e.param16.numel() == n,
               "adamw_update: param16 must be bf16 or f16 of the param's {} elements, is {} of {}", n,
               dtype_name(e.param16.dtype), e.param16.numel());
      const Precision p16 = e.param16.dtype == DType::bf16 ? Precision::bf16 : Precision::fp16;
      if (bf16_moments)
        cpu::adamw_update(e.param.f32(), e.param16.half(), p16, e.grad.f32(), e.m.half(), e.v.half(), n, st);
      else
        cpu::adamw_update(e.param.f32(), e.param16.half(), p16, e.grad.f32(), e.m.f32(), e.v.f32(), n, st);
      continue;
    }
    if (!dev) {
      if (bf16_moments)
        cpu::adamw_update(e.param.f32(), e.grad.f32(), e.m.half(), e.v.half(), n, st);
      else
        cpu::adamw_update(e.param.f32(), e.grad.f32(), e.m.f32(), e.v.f32(), n, st);
      continue;
    }
    ranges[count++] = AdamWRange{e.param.f32(), e.grad.f32(), e.m.f32(), e.v.f32(), n};
    if (count == kBatch) flush();
  }
  flush();
}

}  // namespace megatrain
