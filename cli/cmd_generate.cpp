// `megatrain generate --checkpoint DIR --prompt TEXT [--tokenizer bytes|tokenizer.json]
//   [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]`: prints the prompt,
// then text sampled from a checkpoint with KV-cached decoding on CPU (model/generate.h), streamed as
// it is produced. The architecture comes from the checkpoint's stored config. Invariant: the same
// checkpoint, prompt and options print the same text (temperature 0 = greedy; otherwise the draws
// are keyed by --seed and the position). Rank 0 does the work; other ranks return at once.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "kernels/check.h"
#include "model/generate.h"
#include "parallel/comm.h"
#include "trainer/checkpoint.h"
#include "checkpoint/checkpoint_file.h"
#include "cli/commands.h"
#include "config/config.h"

namespace megatrain {
namespace {

struct Options {
  std::string checkpoint, prompt, tokenizer = "bytes";
  int max_new_tokens = 100;
  SamplingOptions sampling;
};

void check_options(const Options& o) {
  MT_INPUT_CHECK(o.max_new_tokens >= 0, "generate: --max-new-tokens {} must be ≥ 0", o.max_new_tokens);
  MT_INPUT_CHECK(std::isfinite(o.sampling.temperature) && o.sampling.temperature >= 0.0f,
                 "generate: --temperature {} must be ≥ 0 (0 = greedy)", o.sampling.temperature);
  MT_INPUT_CHECK(o.sampling.top_k >= 0, "generate: --top-k {} must be ≥ 0 (0 = all ids)", o.sampling.top_k);
  MT_INPUT_CHECK(o.sampling.top_p > 0.0f && o.sampling.top_p <= 1.0f,
                 "generate: --top-p {} must be in (0, 1] (1 = no nucleus cut)", o.sampling.top_p);
}

int run_generate(const Options& o) {
  check_options(o);
  const std::string file = checkpoint_model_file(o.checkpoint);
  const CheckpointMeta meta = checkpoint_file_read_meta(file);
  const Config cfg = load_config_text(meta.config_toml, file + " (its stored config)");
  const ModelConfig& mc = cfg.model;
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(o.tokenizer);
  MT_INPUT_CHECK(tok->vocab_size() <= mc.vocab_size,
                 "--tokenizer {} has {} ids but the checkpoint's model.vocab_size is {}; use the tokenizer the "
                 "model was trained with",
                 o.tokenizer, tok->vocab_size(), mc.vocab_size);
  std::vector<int32_t> prompt = tok->encode(o.prompt);
  if (prompt.empty()) prompt.push_back(tok->eod_id());  // unconditional: start as a new document does
  MT_INPUT_CHECK(static_cast<int>(prompt.size()) <= mc.max_seq_len,
                 "--prompt is {} tokens but the model's max_seq_len is {}; shorten it", prompt.size(),
                 mc.max_seq_len);

  // Parameters only: the Adam state is read into the gradient buffer and dropped.
  GptModel model(mc, 1, 1);
  checkpoint_file_read(file, checkpoint_tensors_full(model.layout(), model.params(), model.grads(), model.grads(), 0, 1));
  GptDecoder decoder(model);

  GenerateOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.stop_token = tok->eod_id();
  g.vocab = tok->vocab_size();
  g.sampling = o.sampling;
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  std::fflush(stdout);
  const GenerateResult r = generate(decoder, prompt, g, [&](int32_t id) {
    const std::string piece = tok->decode(std::span<const int32_t>(&id, 1));
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const size_t n = r.tokens.size();
  switch (r.stop) {
    case StopReason::max_new_tokens:
      fmt::print(stderr, "[generate: {} new tokens (--max-new-tokens)]\n", n);
      break;
    case StopReason::end_of_document:
      fmt::print(stderr, "[generate: {} new tokens, stopped at the end-of-document token]\n", n);
      break;
    case StopReason::max_seq_len:
      fmt::print(stderr, "[generate: {} new tokens, stopped at the model's max_seq_len = {} tokens]\n", n,
                 mc.max_seq_len);
      break;
  }
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& root) {
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("generate", "Print text sampled from a checkpoint (KV-cached decoding on CPU)");
  app->add_option("--checkpoint", opts->checkpoint, "Checkpoint folder (DIR/step_N) or checkpoint dir with 'latest'")
      ->required();
  app->add_option("--prompt", opts->prompt, "Text to continue (empty: start a new document)")->required();
  app->add_option("--tokenizer", opts->tokenizer, "\"bytes\" or a Hugging Face tokenizer.json")->capture_default_str();
  app->add_option("--max-new-tokens", opts->max_new_tokens, "Stop after this many new tokens")->capture_default_str();
  app->add_option("--temperature", opts->sampling.temperature, "Softmax temperature; 0 = greedy")
      ->capture_default_str();
  app->add_option("--top-k", opts->sampling.top_k, "Sample among the k most likely tokens; 0 = all")
      ->capture_default_str();
  app->add_option("--top-p", opts->sampling.top_p, "Nucleus sampling mass in (0, 1]; 1 = off")->capture_default_str();
  app->add_option("--seed", opts->sampling.seed, "Seed of the sampling draws")->capture_default_str();
  return {app, [opts] { return Comm::world().rank() == 0 ? run_generate(*opts) : 0; }, /*uses_mpi=*/true};
}

}  // namespace megatrain
