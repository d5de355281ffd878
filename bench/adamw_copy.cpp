// AdamW and mixed precision's 16-bit parameter copy at the GPT-2-124M shape (the layout of
// configs/gpt2_124m.toml, 124.4 M floats, one rank holding all of it: ZeRO stage 0), timed two ways
// in one run, interleaved, median over --reps:
//   two passes  AdamW::step over the float32 masters, then convert of the whole range to the copy
//               (what ZeroState::step_end did before the fused copy)
//   fused       AdamW::step writing the copy in the update's own pass (kernels/cpu/adamw.cpp
//               [Note: fused 16-bit copy])
// and checks that both leave the same bits. Prints the CPU and its flags first, and the process CPU
// time beside the wall clock (on a shared machine, with OMP_NUM_THREADS=1, the steadier figure).
//   adamw_copy [--precision bf16|fp16] [--reps N]
// Run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (bench/RESULTS.md).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "bench/measure.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "model/gpt.h"
#include "optim/adamw.h"

using namespace megatrain;
using Clock = std::chrono::steady_clock;
using bench::cpu_line;
using bench::cpu_seconds;
using bench::median;

int main(int argc, char** argv) {
  CLI::App app{"AdamW + 16-bit copy: two passes against the fused pass"};
  std::string precision = "bf16";
  int reps = 7;
  app.add_option("--precision", precision, "bf16 | fp16")->check(CLI::IsMember({"bf16", "fp16"}));
  app.add_option("--reps", reps, "timed repetitions of each (interleaved)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const DType d = precision == "bf16" ? DType::bf16 : DType::f16;
  ModelConfig cfg;
  cfg.n_layers = 12, cfg.d_model = 768, cfg.n_heads = 12, cfg.vocab_size = 50257, cfg.max_seq_len = 1024;
  const ParamLayout layout = gpt_param_layout(cfg);
  const int64_t n = layout.total();
  fmt::print("{}\n{} floats (GPT-2 124M layout), {} copy, {} threads, median of {} interleaved repetitions\n",
             cpu_line(), n, precision, omp_get_max_threads(), reps);
  const auto sized = static_cast<size_t>(n);
  std::vector<float> grads(sized), masters_a(sized), masters_b(sized);
  const RngKey k{1, static_cast<uint32_t>(RngPurpose::test), 0, 0};
  for (size_t i = 0; i < sized; ++i) {
    const auto w = rng_words(k, i);
    masters_a[i] = static_cast<float>(w[0] % 2001) * 1e-5f - 0.01f;
    grads[i] = static_cast<float>(w[1] % 2001) * 1e-4f - 0.1f;
  }
  masters_b = masters_a;
  std::vector<uint16_t> copy_a(sized), copy_b(sized);
  const Stream s = Stream::cpu();
  AdamW two_pass(layout, AdamWOptions{}), fused(layout, AdamWOptions{});
  const Shape all{n};
  // The copy starts as the masters' rounding (ZeroState::params_written): the fused pass leaves the
  // alignment gaps between tensors, which no update changes, as they are.
  convert(s, Tensor(copy_b.data(), all, d), Tensor(masters_b.data(), all));
  std::vector<double> t_two, t_fused, c_two, c_fused;
  for (int r = 0; r <= reps; ++r) {  // repetition 0 warms up
    auto t0 = Clock::now();
    double c0 = cpu_seconds();
    two_pass.step(masters_a.data(), grads.data(), 1e-4f, 0.5);
    convert(s, Tensor(copy_a.data(), all, d), Tensor(masters_a.data(), all));
    const double a = std::chrono::duration<double>(Clock::now() - t0).count(), ca = cpu_seconds() - c0;
    t0 = Clock::now();
    c0 = cpu_seconds();
    fused.step(masters_b.data(), grads.data(), 1e-4f, 0.5, 1.0f, Tensor(copy_b.data(), all, d));
    const double b = std::chrono::duration<double>(Clock::now() - t0).count(), cb = cpu_seconds() - c0;
    if (r > 0) t_two.push_back(a), t_fused.push_back(b), c_two.push_back(ca), c_fused.push_back(cb);
  }
  const bool same = std::memcmp(masters_a.data(), masters_b.data(), sized * 4) == 0 &&
                    std::memcmp(copy_a.data(), copy_b.data(), sized * 2) == 0;
  const double a = median(t_two), b = median(t_fused);
  const auto ms = [](std::vector<double> v) {
    for (double& x : v) x *= 1e3;
    return v;
  };
  fmt::print("two passes (AdamW, then convert)  {:8.1f} ms   per repetition: {:.1f}\n", a * 1e3,
             fmt::join(ms(t_two), ", "));
  fmt::print("fused (copy in the update's pass) {:8.1f} ms   per repetition: {:.1f}\n", b * 1e3,
             fmt::join(ms(t_fused), ", "));
  fmt::print("speed-up {:.2f}x (wall clock); by process CPU time {:.1f} against {:.1f} ms, {:.2f}x; results bitwise "
             "equal: {}\n",
             a / b, median(c_two) * 1e3, median(c_fused) * 1e3, median(c_two) / median(c_fused), same ? "yes" : "NO");
  return same ? 0 : 1;
}
