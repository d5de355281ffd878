// Documents packed into a sample (data.reset_attention_mask, reset_position_ids): what the
// per-document attention saves at the GPT-2-124M shape, in one run. Each sequence of T tokens packs
// documents of 64–256 tokens (uniform, fixed seed). Reports, as medians of --reps after a warm-up:
//   attention   one layer's attention forward + backward (B, T, 12 heads of 64), causal over the
//               whole sequence vs within each document: the ratio is the work the skipped key
//               blocks save (the documents' mean length over T, roughly);
//   step        the model's forward + backward (no optimizer), without and with the documents, and
//               the attention's share of each (12 layers × the attention time / the step time).
// Run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (bench/RESULTS.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <vector>

#include "bench/measure.h"
#include "data/packed_documents.h"
#include "kernels/ops.h"
#include "kernels/rng.h"
#include "model/gpt.h"

using namespace megatrain;
using bench::median;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

uint32_t word(uint64_t i) { return rng_words(RngKey{7, static_cast<uint32_t>(RngPurpose::test), 0, 0}, i)[0]; }

// (B, T) tokens of documents of 64–256 tokens, each ended by `eod`.
std::vector<int32_t> packed_tokens(int B, int T, int vocab, int32_t eod) {
  std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
  uint64_t n = 0;
  int left = 0;
  for (int32_t& t : tokens) {
    if (left == 0) left = 64 + static_cast<int>(word(n++) % 193);
    t = --left == 0 ? eod : static_cast<int32_t>(word(n++) % static_cast<uint32_t>(vocab - 1));
  }
  return tokens;
}

double time_attention(int B, int T, int H, int D, const Tensor& first_key, int reps) {
  const int64_t row = int64_t{3} * H * D;
  std::vector<float> qkv(static_cast<size_t>(B * T * row)), out(static_cast<size_t>(B * T * H * D)),
      dout(out.size(), 0.01f), lse(static_cast<size_t>(B * H * T)), dqkv(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(word(i) % 1000) * 1e-3f - 0.5f;
  const Stream s = Stream::cpu();
  const Tensor x(qkv.data(), {B, T, row}), o(out.data(), {B, T, H * D}), l(lse.data(), {B, H, T});
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    attention_forward(s, o, l, x, H, H, first_key);
    attention_backward(s, Tensor(dqkv.data(), {B, T, row}), Tensor(dout.data(), {B, T, H * D}), x, o, l, H, H,
                       first_key);
    if (r > 0) times.push_back(seconds_since(t0));
  }
  return median(times);
}

double time_step(GptModel& model, const std::vector<int32_t>& in, const std::vector<int32_t>& tg, const int32_t* starts,
                 int reps) {
  ForwardOptions fo;
  fo.grad = LossGrad::in_place;
  fo.dloss_scale = 1.0f / static_cast<float>(in.size());
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    model.zero_grads();
    model.stage().forward(0, MicroBatch{in.data(), tg.data(), fo, starts, starts});
    model.stage().backward(0);
    if (r > 0) times.push_back(seconds_since(t0));
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Per-document attention at the GPT-2-124M shape");
  int B = 1, T = 1024, reps = 5;
  app.add_option("--batch", B, "sequences per step");
  app.add_option("--seq", T, "tokens per sequence");
  app.add_option("--reps", reps, "timed repetitions (median)");
  CLI11_PARSE(app, argc, argv);
  ModelConfig cfg;
  cfg.n_layers = 12, cfg.d_model = 768, cfg.n_heads = 12, cfg.vocab_size = 50257, cfg.max_seq_len = T;
  cfg.dropout = 0.0f;
  const int32_t eod = 50256;
  const std::vector<int32_t> tokens = packed_tokens(B, T, cfg.vocab_size, eod);
  std::vector<int32_t> targets(tokens.size()), starts(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) targets[i] = static_cast<int32_t>(word(1000000 + i) % 50000);
  int documents = 0;
  for (int b = 0; b < B; ++b) find_document_starts(tokens.data() + b * T, T, eod, starts.data() + b * T);
  for (size_t i = 0; i < starts.size(); ++i) documents += starts[i] == static_cast<int32_t>(i % T);
  fmt::print("{}\n", bench::cpu_line());
  fmt::print("B {} × T {}, {} documents of mean length {:.0f}; median of {} after a warm-up\n", B, T, documents,
             static_cast<double>(B * T) / documents, reps);
  const int D = cfg.d_model / cfg.n_heads;
  const double att = time_attention(B, T, cfg.n_heads, D, Tensor{}, reps);
  const double att_docs = time_attention(B, T, cfg.n_heads, D, Tensor(starts.data(), {B, T}), reps);
  fmt::print("attention fwd+bwd, one layer: causal {:.1f} ms, per document {:.1f} ms, ratio {:.2f}\n", 1e3 * att,
             1e3 * att_docs, att_docs / att);
  GptModel model(cfg, B, T);
  model.init(1);
  const double step = time_step(model, tokens, targets, nullptr, reps);
  const double step_docs = time_step(model, tokens, targets, starts.data(), reps);
  fmt::print(
      "step fwd+bwd: causal {:.1f} ms (attention {:.0f} %), per document {:.1f} ms (attention {:.0f} %), "
      "ratio {:.3f}\n",
      1e3 * step, 100.0 * cfg.n_layers * att / step, 1e3 * step_docs, 100.0 * cfg.n_layers * att_docs / step_docs,
      step_docs / step);
  return 0;
}
