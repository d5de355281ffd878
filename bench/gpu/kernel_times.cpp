// kernel_times: the time of each op of kernels/ops.h at a model's shapes on one device, against a
// reference where one exists (bench/gpu/device_check.sh, its kernels stage; issue: CUDA backend):
//   - GEMMs (the linear layers, forward and both backward products) against the same products by
//     plain cuBLAS (cublasGemmEx, float32 accumulation, the same input type) on the same random
//     operands (bench/gpu/cublas_reference.h);
//   - the flash-attention kernels against cuDNN's fused attention (kernels/cuda/cudnn_attention.h,
//     with its bf16 conversions) when the backend has it and the GEMM inputs are bf16;
//   - the memory-bound ops (norms, activations, loss, AdamW) against a device-to-device copy moving
//     the same number of bytes, the practical bound of a kernel that reads and writes each byte once.
//   kernel_times --device cuda|cpu --shape gpt2_124m|llama_1b3|tiny [--iters N] [--precision fp32|bf16]
// Each figure, the op's and its reference's alike: the median of 5 timings of N/5 calls each (N =
// --iters, default 20; at least one call a timing) after 3 warm-up calls, in milliseconds per call,
// timed by Events on the stream; the median leaves out a timing that a clock change or another
// process disturbed. On CPU there is no reference; `--device cpu --shape tiny` is the benchmark's
// own check.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "bench/gpu/cublas_reference.h"
#include "kernels/cuda/backend.h"
#include "kernels/flat_buffer.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

namespace megatrain {
namespace {

struct Shapes {
  int B, T, C, H, Hkv, F, V;  // F: MLP width (GELU: the 4·C layer; SwiGLU: each half)
  bool llama;
};

Shapes shapes_of(const std::string& name) {
  if (name == "gpt2_124m") return {16, 1024, 768, 12, 12, 3072, 50304, false};
  if (name == "llama_1b3") return {4, 2048, 2048, 16, 8, 5632, 32000, true};
  if (name == "tiny") return {2, 64, 64, 4, 2, 96, 300, true};
  throw Error(fmt::format("--shape {}: expected gpt2_124m, llama_1b3 or tiny", name));
}

class Bench {
 public:
  Bench(const Stream& s, int iters) : s_(s), iters_(iters) {}

  // A tensor of `shape` on the stream's device, filled with N(0, scale²) values.
  Tensor randn(Shape shape, float scale = 1.0f) {
    const int64_t n = shape.numel();
    std::vector<float> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      host[static_cast<size_t>(i)] = scale * rng_normal({7, static_cast<uint32_t>(RngPurpose::test), 0, 0}, draws_++);
    buffers_.emplace_back(n, s_);
    const Tensor t = buffers_.back().part(0, n).reshaped(shape);
    copy_from_host(s_, t, host.data());
    return t;
  }
  Tensor tokens(int64_t n, int V) {
    std::vector<int32_t> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % V);
    arenas_.emplace_back(static_cast<size_t>(n) * 4, s_);
    const Tensor t = arenas_.back().tensor_i32(Shape{n});
    copy_from_host(s_, t, host.data());
    return t;
  }
  // The same values in the stream's 16-bit GEMM input type (t itself on a float32 stream): the
  // operands the cuBLAS reference multiplies.
  Tensor gemm_input(const Tensor& t) {
    if (s_.matmul == Precision::fp32) return t;
    arenas_.emplace_back(static_cast<size_t>(t.numel()) * 2, s_);
    Arena& a = arenas_.back();
    const Tensor half =
        Tensor(a.alloc_u16(t.numel()), t.shape, s_.matmul == Precision::bf16 ? DType::bf16 : DType::f16).on(a.device());
    convert(s_, half, t);
    return half;
  }
  // Milliseconds per call of op: the median of kTimings timings of iters/kTimings calls each (at
  // least one), after 3 warm-up calls.
  double time(const std::function<void()>& op) {
    for (int i = 0; i < 3; ++i) op();
    const int calls = std::max(1, iters_ / kTimings);
    std::vector<double> ms;
    for (int t = 0; t < kTimings; ++t) {
      Event start(s_.device), end(s_.device);
      start.record(s_);
      for (int i = 0; i < calls; ++i) op();
      end.record(s_);
      end.synchronize();
      ms.push_back(elapsed_ms(start, end) / calls);
    }
    std::nth_element(ms.begin(), ms.begin() + kTimings / 2, ms.end());
    return ms[kTimings / 2];
  }
  // The time of a device copy moving `bytes` (half read, half written).
  double copy_ms(int64_t bytes) {
    const int64_t n = bytes / 8;
    FlatBuffer a(n, s_), b(n, s_);
    return time([&] { copy(s_, b.part(0, n), a.part(0, n)); });
  }
  const Stream& stream() const { return s_; }

 private:
  static constexpr int kTimings = 5;  // odd: the median is one of them
  Stream s_;
  int iters_;
  uint64_t draws_ = 0;
  std::deque<FlatBuffer> buffers_;
  std::deque<Arena> arenas_;
};

void row(const std::string& op, double ms, const std::string& rate, const std::string& ref,
         std::optional<double> ref_ms) {
  fmt::print("{:<34} {:>9.3f} {:>14}  {:<22} {:>9} {:>8}\n", op, ms, rate, ref,
             ref_ms ? fmt::format("{:.3f}", *ref_ms) : "-", ref_ms ? fmt::format("{:.2f}", ms / *ref_ms) : "-");
}
std::string tflops(double flops, double ms) {
  const double per_s = flops / (ms * 1e-3);
  return per_s >= 1e12 ? fmt::format("{:.1f} TFLOP/s", per_s / 1e12) : fmt::format("{:.1f} GFLOP/s", per_s / 1e9);
}
std::string gbps(double bytes, double ms) { return fmt::format("{:.0f} GB/s", bytes / (ms * 1e-3) / 1e9); }

// The fastest cuBLAS GEMM of the run: the rate this card's GEMMs reach, which bench/gpu/device_check.sh
// holds the training MFU to beside the datasheet peak.
struct BestGemm {
  double flops_per_s = 0;
  std::string gemm;
  void offer(const std::string& name, double flops, std::optional<double> ms) {
    if (ms && flops / (*ms * 1e-3) > flops_per_s) flops_per_s = flops / (*ms * 1e-3), gemm = name;
  }
};

// One linear layer (N × C → OC): forward, then the input and weight gradients.
void linear(Bench& b, BestGemm& best, const std::string& name, int64_t N, int C, int OC) {
  const Stream& s = b.stream();
  const Tensor x = b.randn({N, C}), w = b.randn({OC, C}, 0.02f), y = b.randn({N, OC}), dy = b.randn({N, OC});
  const Tensor dx = b.randn({N, C}), dw = b.randn({OC, C});
  const double flops = 2.0 * static_cast<double>(N) * C * OC;
  // cuBLAS on the same values, in the GEMM's input type (rounded once here), into the same outputs.
  std::optional<CublasOperands> operands;
  if (s.device == Device::cuda) operands = CublasOperands{b.gemm_input(x), b.gemm_input(w), b.gemm_input(dy), {}};
  const auto ref = [&](CublasProduct p, const Tensor& out) -> std::optional<double> {
    if (!operands) return std::nullopt;
    operands->out = out;
    const auto call = cublas_gemm(s, p, *operands);
    return call ? std::optional<double>(b.time(*call)) : std::nullopt;
  };
  const auto timed = [&](const std::string& pass, double ms, CublasProduct p, const Tensor& out) {
    const std::optional<double> ref_ms = ref(p, out);
    row(name + pass, ms, tflops(flops, ms), "cuBLAS", ref_ms);
    best.offer(name + pass, flops, ref_ms);
  };
  timed(" forward", b.time([&] { matmul_forward(s, y, x, w, Tensor{}); }), CublasProduct::forward, y);
  timed(" input grad", b.time([&] { matmul_backward(s, dx, Tensor{}, Tensor{}, dy, x, w); }),
        CublasProduct::input_grad, dx);
  timed(" weight grad", b.time([&] { matmul_backward(s, Tensor{}, dw, Tensor{}, dy, x, Tensor{}); }),
        CublasProduct::weight_grad, dw);
}

void run(Bench& b, const Shapes& m) {
  const Stream& s = b.stream();
  const int64_t N = static_cast<int64_t>(m.B) * m.T;
  const int D = m.C / m.H, QKV = (m.H + 2 * m.Hkv) * D;
  fmt::print("{:<34} {:>9} {:>14}  {:<22} {:>9} {:>8}\n", "op", "ms", "rate", "reference", "ref ms", "ratio");
  BestGemm best;
  linear(b, best, "qkv", N, m.C, QKV);
  linear(b, best, "attention out", N, m.C, m.C);
  linear(b, best, m.llama ? "mlp up (gate|up)" : "mlp up", N, m.C, m.llama ? 2 * m.F : m.F);
  linear(b, best, "mlp down", N, m.F, m.C);
  if (best.flops_per_s > 0)
    fmt::print("cuBLAS {} GEMM best: {:.1f} TFLOP/s ({})\n", precision_name(s.matmul), best.flops_per_s / 1e12,
               best.gemm);

  // Attention: causal, so half the T² score matrix; backward ≈ 2.5 × forward's products.
  const Tensor qkv = b.randn({m.B, m.T, QKV}), out = b.randn({N, m.C}), lse = b.randn({m.B, m.H, m.T});
  const Tensor dout = b.randn({N, m.C}), dqkv = b.randn({m.B, m.T, QKV});
  const double att_flops = 4.0 * m.B * m.H * static_cast<double>(m.T) * m.T * D / 2;
  const auto fwd = [&] { attention_forward(s, out.reshaped({m.B, m.T, m.C}), lse, qkv, m.H, m.Hkv); };
  const auto bwd = [&] {
    attention_backward(s, dqkv, dout.reshaped({m.B, m.T, m.C}), qkv, out.reshaped({m.B, m.T, m.C}), lse, m.H, m.Hkv);
  };
  // The reference: the same ops on cuDNN's fused attention (its 16-bit conversions included),
  // where the backend has it and the GEMM inputs are 16-bit.
  std::optional<double> cudnn_f, cudnn_b;
  if (s.device == Device::cuda && s.matmul != Precision::fp32) {
    try {
      cuda_backend().set_attention(AttentionImpl::cudnn);
      cudnn_f = b.time(fwd);
      cudnn_b = b.time(bwd);
    } catch (const Error& e) {
      fmt::print("(no cuDNN reference for attention: {})\n", e.what());
    }
    cuda_backend().set_attention(AttentionImpl::flash);
  }
  const std::string kernels = s.device == Device::cuda ? " (flash)" : "";
  const double af = b.time(fwd);
  row("attention forward" + kernels, af, tflops(att_flops, af), cudnn_f ? "cuDNN fused attention" : "-", cudnn_f);
  const double ab = b.time(bwd);
  row("attention backward" + kernels, ab, tflops(2.5 * att_flops, ab), cudnn_b ? "cuDNN fused attention" : "-",
      cudnn_b);

  // Memory-bound ops against a copy of the bytes they move.
  const auto bound = [&](const std::string& name, double bytes, const std::function<void()>& op) {
    const double ms = b.time(op);
    row(name, ms, gbps(bytes, ms), "copy of the same bytes", b.copy_ms(static_cast<int64_t>(bytes)));
  };
  const Tensor x = b.randn({N, m.C}), y = b.randn({N, m.C}), w = b.randn({m.C}), bias = b.randn({m.C});
  const Tensor mean = b.randn({N}), rstd = b.randn({N}), dx = b.randn({N, m.C});
  const Tensor dw = b.randn({m.C}), db = b.randn({m.C});
  const double nc = 4.0 * N * m.C;
  if (m.llama) {
    bound("rmsnorm forward", 2 * nc, [&] { rmsnorm_forward(s, y, rstd, x, w, 1e-5f); });
    bound("rmsnorm backward (+ residual)", 4 * nc, [&] { rmsnorm_backward(s, dx, dw, y, x, x, w, rstd); });
  } else {
    bound("layernorm forward", 2 * nc, [&] { layernorm_forward(s, y, mean, rstd, x, w, bias, 1e-5f); });
    bound("layernorm backward (+ residual)", 4 * nc,
          [&] { layernorm_backward(s, dx, dw, db, y, x, x, w, mean, rstd); });
  }
  const int64_t nf = N * m.F;
  if (m.llama) {
    const Tensor in = b.randn({N, 2 * m.F}), act = b.randn({N, m.F}), din = b.randn({N, 2 * m.F});
    bound("swiglu forward", 4.0 * 3 * nf, [&] { swiglu_forward(s, act, in); });
    bound("swiglu backward", 4.0 * 5 * nf, [&] { swiglu_backward(s, din, act, in); });
  } else {
    const Tensor in = b.randn({nf}), act = b.randn({nf}), din = b.randn({nf});
    bound("gelu forward", 4.0 * 2 * nf, [&] { gelu_forward(s, act, in); });
    bound("gelu backward", 4.0 * 3 * nf, [&] { gelu_backward(s, din, act, in); });
  }
  // The loss over the whole vocabulary, gradient in place: read (max), read + write (exp), read +
  // write (finish).
  const Tensor logits = b.randn({N, m.V}), targets = b.tokens(N, m.V);
  const Tensor row_max = b.randn({N}), sum_exp = b.randn({N}), target_logit = b.randn({N}), losses = b.randn({N});
  bound("softmax cross-entropy + grad", 4.0 * 5 * N * m.V, [&] {
    cross_entropy_max(s, row_max, logits, m.V);
    cross_entropy_sums(s, sum_exp, target_logit, logits, row_max, targets, 0, m.V, LossGrad::in_place);
    cross_entropy_finish(s, losses, logits, row_max, sum_exp, target_logit, targets, 0, m.V, LossGrad::in_place,
                         1.0f / static_cast<float>(N));
  });
  // AdamW over as many floats as 12 blocks' weights of this width: read p, g, m, v; write p, m, v.
  const int64_t P = 12LL * 12 * m.C * m.C;
  const Tensor p = b.randn({P}, 0.02f), g = b.randn({P}, 1e-3f), mo = b.randn({P}, 1e-3f), v = b.randn({P}, 0.0f);
  const AdamWStep st{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f};
  bound(fmt::format("adamw ({:.1f} M floats)", P / 1e6), 4.0 * 7 * P, [&] { adamw_update(s, {{p, g, mo, v}}, st); });
}

}  // namespace
}  // namespace megatrain

int main(int argc, char** argv) {
  using namespace megatrain;
  CLI::App app("Per-kernel times of the ops on a device against cuBLAS / a copy of the same bytes");
  std::string device = "cuda", shape = "gpt2_124m", precision = "bf16";
  int iters = 20;
  app.add_option("--device", device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--shape", shape, "gpt2_124m, llama_1b3 or tiny")
      ->check(CLI::IsMember({"gpt2_124m", "llama_1b3", "tiny"}));
  app.add_option("--precision", precision, "the GEMMs' inputs: fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--iters", iters, "timed calls per op, in 5 timings whose median is reported")
      ->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    const Precision p = precision == "bf16" ? Precision::bf16 : Precision::fp32;
    Bench b(Stream{device == "cuda" ? Device::cuda : Device::cpu, nullptr, p}, iters);
    fmt::print("{} shapes on {}, GEMM inputs {}, {} calls per op: ms per call, median of 5 timings\n", shape, device,
               precision, iters);
    run(b, shapes_of(shape));
  } catch (const Error& e) {
    fmt::print(stderr, "kernel_times: {}\n", e.what());
    return 1;
  }
  return 0;
}
