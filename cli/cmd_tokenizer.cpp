// `megatrain tokenizer train --input FILE... --vocab-size N --output tokenizer.json [--special
// TOKEN...]`: trains a byte-level BPE on text files and writes a Hugging Face tokenizer.json that
// `--tokenizer` options (preprocess, tokenize, generate) load.
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "cli/commands.h"
#include "data/bpe_trainer.h"

namespace megatrain {

Command add_tokenizer_command(CLI::App& root) {
  struct Options {
    BpeTrainOptions train;
    std::string output;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("tokenizer", "Tokenizer tools (train a byte-level BPE)");
  app->require_subcommand(1);
  CLI::App* train = app->add_subcommand("train", "Train a byte-level BPE and write a Hugging Face tokenizer.json");
  train->add_option("--input", opts->train.inputs, "Text files to train on")->required()->expected(1, -1);
  train->add_option("--vocab-size", opts->train.vocab_size, "Total vocabulary size, special tokens included")
      ->required();
  train->add_option("--output", opts->output, "tokenizer.json path to write")->required();
  train->add_option("--special", opts->train.special_tokens, "Special tokens (ids after the merges)")
      ->expected(1, -1)
      ->capture_default_str();
  return {app, [opts] {
            const auto start = std::chrono::steady_clock::now();
            const BpeTrainResult result = train_bpe(opts->train);
            write_bpe_tokenizer_json(result, opts->output);
            const double secs =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            fmt::print("wrote {}: {} tokens ({} merges, {} special), {} distinct words, {:.1f}s\n", opts->output,
                       result.vocab.size() + result.special_tokens.size(), result.merges.size(),
                       result.special_tokens.size(), result.words, secs);
            return 0;
          }};
}

}  // namespace megatrain
