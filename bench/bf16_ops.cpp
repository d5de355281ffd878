// The CPU ops that read and write bf16 activations (issue 36, point 1; [Note: bf16 activations] in
// kernels/ops.h), each on float32 activations against the same op on bf16 activations holding the
// same values' rounding, at the GPT-2 124M shapes of one layer (B 1 × T 1024, C 768, 12 heads of 64,
// MLP 3072; SwiGLU and RoPE, which GPT-2 does not use, at the same sizes). Every op runs on a bf16
// stream, so the linear layers' GEMMs multiply bf16 values in both columns: float32 operands
// (weights and activations) are rounded into scratch as they are read, bf16 ones are taken as they
// are. On a CPU without a native bf16 GEMM (cpu::native_bf16_gemm) the GEMM itself is float32 either
// way, so what is measured is the rest: the conversion passes, and the bytes the ops read and write.
// The two columns alternate within each repetition (repetition 0 warms up); medians of --reps, at
// each thread count of --threads; wall clock, and the process CPU time (on a shared machine the
// steadier figure). Prints the CPU and its flags first.
//   bf16_ops [--tokens T] [--reps N] [--threads 1,2]
// Run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (bench/RESULTS.md).
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench/measure.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

using namespace megatrain;
using Clock = std::chrono::steady_clock;
using bench::cpu_seconds;
using bench::median;

namespace {

// The CPU line, with the cores and how busy the machine is (other processes' threads take cores from
// the timed ones).
std::string cpu_and_load() {
  std::ifstream loadavg("/proc/loadavg");
  std::string load;
  loadavg >> load;
  return fmt::format("{}; {} cores, load average {} (1 min) at the start", bench::cpu_line(),
                     std::thread::hardware_concurrency(), load);
}

std::vector<float> randn(Shape s, uint32_t stream, float scale) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  const RngKey k{7, static_cast<uint32_t>(RngPurpose::test), stream, 0};
  for (size_t i = 0; i < v.size(); ++i) v[i] = rng_normal(k, i) * scale;
  return v;
}

// A float32 tensor (the residual stream, norm parameters, statistics, float32 gradients).
struct F32 {
  Shape shape;
  std::vector<float> v;
  F32(Shape s, uint32_t stream, float scale) : shape(s), v(randn(s, stream, scale)) {}
  Tensor t() { return Tensor(v.data(), shape); }
};

// An activation or weight in both forms: float32 values and their bf16 rounding.
struct Pair {
  Shape shape;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  Pair(Shape s, uint32_t stream, float scale) : shape(s), f32(randn(s, stream, scale)), bf16(f32.size()) {
    convert(Stream::cpu(), Tensor(bf16.data(), shape, DType::bf16), Tensor(f32.data(), shape));
  }
  Tensor as(DType d) { return d == DType::f32 ? Tensor(f32.data(), shape) : Tensor(bf16.data(), shape, DType::bf16); }
};

struct Op {
  std::string name;
  std::function<void(DType)> run;  // the op with its activations in this dtype
};

struct Row {
  std::string name;
  double f32_ms, bf16_ms, f32_cpu_ms, bf16_cpu_ms;
};

Row time_op(const Op& op, int reps) {
  std::vector<double> wall[2], cpu[2];
  for (int r = 0; r <= reps; ++r)
    for (int i = 0; i < 2; ++i) {
      const auto t0 = Clock::now();
      const double c0 = cpu_seconds();
      op.run(i == 0 ? DType::f32 : DType::bf16);
      if (r == 0) continue;
      wall[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      cpu[i].push_back((cpu_seconds() - c0) * 1e3);
    }
  return {op.name, median(wall[0]), median(wall[1]), median(cpu[0]), median(cpu[1])};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU ops on float32 against bf16 activations (GPT-2 124M layer shapes)"};
  int64_t T = 1024;
  int reps = 7;
  std::vector<int> threads = {1, 2};
  app.add_option("--tokens", T, "tokens of the micro-batch (B 1 × T)")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions of each (after one warm-up)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "OpenMP thread counts to run at")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  constexpr int64_t C = 768, H = 12, D = 64, F = 3072;
  const Stream s = Stream::cpu(Precision::bf16);
  fmt::print("{}\nB 1 x T {}, C {}, {} heads of {}, MLP {}; bf16 stream, GEMMs: {}\n", cpu_and_load(), T, C, H, D, F,
             matmul_path(s));
  fmt::print("median of {} repetitions after a warm-up, float32 and bf16 alternating\n", reps);

  // The residual stream and norm parameters (float32 either way).
  F32 x({T, C}, 1, 1.0f), ln_w({C}, 2, 1.0f), ln_b({C}, 3, 0.1f), mean({T}, 4, 0.0f), rstd({T}, 5, 0.0f);
  F32 lse({1, H, T}, 6, 0.0f), d_attn({1, T, C}, 7, 1.0f), d_mlp({T, F}, 8, 1.0f), d_swiglu({T, F}, 9, 1.0f);
  F32 dx_c({T, C}, 10, 0.0f), dx_f({T, F}, 11, 0.0f), y_c({T, C}, 12, 0.0f);
  F32 dw_qkv({3 * C, C}, 13, 0.0f), db_qkv({3 * C}, 14, 0.0f), dw_fc({F, C}, 15, 0.0f), db_fc({F}, 16, 0.0f);
  F32 dw_proj({C, F}, 17, 0.0f), b_qkv({3 * C}, 18, 0.02f), b_fc({F}, 19, 0.02f), b_proj({C}, 20, 0.02f);
  // Activations and weights, float32 or bf16.
  Pair normed({T, C}, 30, 1.0f), qkv({1, T, 3 * C}, 31, 1.0f), attn({1, T, C}, 32, 0.5f);
  Pair dqkv({1, T, 3 * C}, 33, 0.0f);
  Pair fc({T, F}, 34, 1.0f), act({T, F}, 35, 0.5f), dfc({T, F}, 36, 0.0f), gate_up({T, 2 * F}, 37, 1.0f);
  Pair swi({T, F}, 38, 0.5f), dgate_up({T, 2 * F}, 39, 0.0f);
  Pair w_qkv({3 * C, C}, 40, 0.02f), w_fc({F, C}, 41, 0.02f), w_proj({C, F}, 42, 0.02f);

  const float eps = 1e-5f, theta = 10000.0f;
  const std::vector<Op> ops = {
      {"layernorm fwd",
       [&](DType d) { layernorm_forward(s, normed.as(d), mean.t(), rstd.t(), x.t(), ln_w.t(), ln_b.t(), eps); }},
      {"rmsnorm fwd", [&](DType d) { rmsnorm_forward(s, normed.as(d), rstd.t(), x.t(), ln_w.t(), eps); }},
      {"matmul fwd qkv 768->2304",
       [&](DType d) { matmul_forward(s, qkv.as(d), normed.as(d), w_qkv.as(d), b_qkv.t()); }},
      {"matmul bwd qkv",
       [&](DType d) { matmul_backward(s, dx_c.t(), dw_qkv.t(), db_qkv.t(), dqkv.as(d), normed.as(d), w_qkv.as(d)); }},
      {"rope fwd", [&](DType d) { rope_apply(s, qkv.as(d), H, H, RopeFrequencies{theta}, RopeDirection::forward); }},
      {"attention fwd", [&](DType d) { attention_forward(s, attn.as(d), lse.t(), qkv.as(d), H, H); }},
      {"attention bwd",
       [&](DType d) { attention_backward(s, dqkv.as(d), d_attn.t(), qkv.as(d), attn.as(d), lse.t(), H, H); }},
      {"matmul fwd fc 768->3072", [&](DType d) { matmul_forward(s, fc.as(d), normed.as(d), w_fc.as(d), b_fc.t()); }},
      {"gelu fwd", [&](DType d) { gelu_forward(s, act.as(d), fc.as(d)); }},
      {"gelu bwd", [&](DType d) { gelu_backward(s, dfc.as(d), d_mlp.t(), fc.as(d)); }},
      {"matmul bwd fc",
       [&](DType d) { matmul_backward(s, dx_c.t(), dw_fc.t(), db_fc.t(), dfc.as(d), normed.as(d), w_fc.as(d)); }},
      {"matmul fwd proj 3072->768", [&](DType d) { matmul_forward(s, y_c.t(), act.as(d), w_proj.as(d), b_proj.t()); }},
      {"matmul bwd proj",
       [&](DType d) { matmul_backward(s, dx_f.t(), dw_proj.t(), Tensor{}, y_c.t(), act.as(d), w_proj.as(d)); }},
      {"swiglu fwd", [&](DType d) { swiglu_forward(s, swi.as(d), gate_up.as(d)); }},
      {"swiglu bwd", [&](DType d) { swiglu_backward(s, dgate_up.as(d), d_swiglu.t(), gate_up.as(d)); }},
  };
  for (const int n : threads) {
    omp_set_num_threads(n);
    fmt::print("\n{} thread{}\n{:<26} {:>9} {:>9} {:>9}   {:>12} {:>12} {:>9}\n", n, n == 1 ? "" : "s", "op", "f32 ms",
               "bf16 ms", "bf16/f32", "f32 CPU ms", "bf16 CPU ms", "bf16/f32");
    double sum[4] = {};
    for (const Op& op : ops) {
      const Row r = time_op(op, reps);
      fmt::print("{:<26} {:9.2f} {:9.2f} {:9.2f}   {:12.2f} {:12.2f} {:9.2f}\n", r.name, r.f32_ms, r.bf16_ms,
                 r.bf16_ms / r.f32_ms, r.f32_cpu_ms, r.bf16_cpu_ms, r.bf16_cpu_ms / r.f32_cpu_ms);
      sum[0] += r.f32_ms, sum[1] += r.bf16_ms, sum[2] += r.f32_cpu_ms, sum[3] += r.bf16_cpu_ms;
    }
    fmt::print("{:<26} {:9.2f} {:9.2f} {:9.2f}   {:12.2f} {:12.2f} {:9.2f}\n", "sum of medians", sum[0], sum[1],
               sum[1] / sum[0], sum[2], sum[3], sum[3] / sum[2]);
  }
  return 0;
}
