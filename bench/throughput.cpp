// Training throughput of a GPT-2-124M-shaped model on CPU, measured against this machine's own
// sgemm throughput at the model's GEMM shapes, in one run:
//   model FLOP/s   = flops_per_token (README "MFU") × tokens per step / step time
//   sgemm FLOP/s   = the FLOPs of one step's linear layers (forward + both backward GEMMs)
//                    / the time cblas_sgemm takes for exactly those GEMMs, run alone
//   utilisation    = model FLOP/s / sgemm FLOP/s
// Also reports peak resident memory. Timings: median of --reps steps after one warm-up step.
// Run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (see bench/RESULTS.md).
#include <fmt/format.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

#include "bench/measure.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/clip.h"

using namespace megatrain;
using bench::median;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

ModelConfig gpt2_124m() {
  ModelConfig c;
  c.n_layers = 12;
  c.d_model = 768;
  c.n_heads = 12;
  c.vocab_size = 50257;
  c.max_seq_len = 1024;
  return c;
}

struct Measured {
  double step_s, tokens_per_s, model_flops, gemm_flops, gemm_s;
};

// Median time of one full training step (forward, backward, AdamW).
double time_steps(const ModelConfig& cfg, int B, int T, int reps) {
  GptModel model(cfg, B, T);
  model.init(1);
  AdamW opt(model.layout(), AdamWOptions{});
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  const RngKey k{1, static_cast<uint32_t>(RngPurpose::test), 0, 0};
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(rng_words(k, 2 * i)[0] % cfg.vocab_size);
    tg[i] = static_cast<int32_t>(rng_words(k, 2 * i + 1)[0] % cfg.vocab_size);
  }
  ForwardOptions fo;
  fo.grad = LossGrad::in_place;
  fo.dloss_scale = 1.0f / static_cast<float>(B * T);
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    model.zero_grads();
    model.forward(in.data(), tg.data(), fo);
    model.backward();
    const double norm = grad_norm(Stream::cpu(), {GradPart(model.grads(), model.layout().total())});
    opt.step(model.params(), model.grads(), 1e-4f, norm);
    if (r > 0) times.push_back(seconds_since(t0));
  }
  return median(times);
}

// The linear layers of one step, each timed forward + backward through the same ops the model uses.
std::pair<double, double> time_gemms(const ModelConfig& cfg, int64_t N, int reps) {
  const int64_t C = cfg.d_model, F = cfg.ffn_dim(), Vp = cfg.padded_vocab(1);
  struct Shape2 {
    int64_t out, in, count;
  };
  const std::vector<Shape2> shapes = {{3 * C, C, cfg.n_layers}, {C, C, cfg.n_layers}, {F, C, cfg.n_layers},
                                      {C, F, cfg.n_layers},     {Vp, C, 1}};
  const Stream s = Stream::cpu();
  double flops = 0, secs = 0;
  for (const auto& sh : shapes) {
    std::vector<float> x(static_cast<size_t>(N * sh.in), 0.01f), w(static_cast<size_t>(sh.out * sh.in), 0.01f),
        y(static_cast<size_t>(N * sh.out)), dx(x.size()), dw(w.size());
    const Tensor X(x.data(), {N, sh.in}), W(w.data(), {sh.out, sh.in}), Y(y.data(), {N, sh.out});
    std::vector<double> times;
    for (int r = 0; r <= reps; ++r) {
      const auto t0 = Clock::now();
      matmul_forward(s, Y, X, W, Tensor{});
      matmul_backward(s, Tensor(dx.data(), {N, sh.in}), Tensor(dw.data(), {sh.out, sh.in}), Tensor{}, Y, X, W);
      if (r > 0) times.push_back(seconds_since(t0));
    }
    secs += median(times) * static_cast<double>(sh.count);
    flops += 6.0 * static_cast<double>(N * sh.out * sh.in * sh.count);
  }
  return {flops, secs};
}

long peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2-124M-shaped CPU training throughput vs. this machine's sgemm"};
  int reps = 3;
  app.add_option("--reps", reps, "timed repetitions (median reported)");
  CLI11_PARSE(app, argc, argv);
  const ModelConfig cfg = gpt2_124m();
  fmt::print("{:>10} {:>10} {:>12} {:>12} {:>14} {:>14} {:>8} {:>10}\n", "batch", "seq", "step_ms", "tokens/s",
             "model GFLOP/s", "sgemm GFLOP/s", "util", "RSS MiB");
  for (const auto& [B, T] : {std::pair{4, 64}, std::pair{1, 1024}}) {
    const double step = time_steps(cfg, B, T, reps);
    const auto [gflop, gsec] = time_gemms(cfg, static_cast<int64_t>(B) * T, reps);
    const double tokens = static_cast<double>(B) * T;
    const double model_rate = model_flops_per_token(cfg, T) * tokens / step;
    const double gemm_rate = gflop / gsec;
    fmt::print("{:>10} {:>10} {:>12.1f} {:>12.1f} {:>14.1f} {:>14.1f} {:>7.1f}% {:>10}\n", B, T, step * 1e3,
               tokens / step, model_rate / 1e9, gemm_rate / 1e9, 100.0 * model_rate / gemm_rate, peak_rss_mib());
  }
  return 0;
}
