// `megatrain tokenizer train --input FILE... --vocab-size N --output tokenizer.json [--special
// TOKEN...]`: trains a byte-level BPE on text files and writes a Hugging Face tokenizer.json that
// `--tokenizer` options (preprocess, tokenize, generate) load. `megatrain tokenizer chat --config
// tokenizer_config.json --input FILE.jsonl [--add-generation-prompt]`: renders each line's
// {"messages": […]} with the config's chat template (data/chat_template.h), one JSON string a line.
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "data/bpe_trainer.h"
#include "data/chat_template.h"
#include "kernels/check.h"

namespace megatrain {

Command add_tokenizer_command(CLI::App& root) {
  struct Options {
    BpeTrainOptions train;
    std::string output;
    std::string chat_config, chat_input;
    bool generation_prompt = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("tokenizer", "Tokenizer tools (train a byte-level BPE, render chats)");
  app->require_subcommand(1);
  CLI::App* train = app->add_subcommand("train", "Train a byte-level BPE and write a Hugging Face tokenizer.json");
  train->add_option("--input", opts->train.inputs, "Text files to train on")->required()->expected(1, -1);
  train->add_option("--vocab-size", opts->train.vocab_size, "Total vocabulary size, special tokens included")
      ->required();
  train->add_option("--output", opts->output, "tokenizer.json path to write")->required();
  train->add_option("--special", opts->train.special_tokens, "Special tokens (ids after the merges)")
      ->expected(1, -1)
      ->capture_default_str();
  CLI::App* chat = app->add_subcommand("chat", "Render JSONL conversations with a chat template, a JSON string a line");
  chat->add_option("--config", opts->chat_config, "tokenizer_config.json holding chat_template")->required();
  chat->add_option("--input", opts->chat_input, "JSONL: each line {\"messages\": [{\"role\", \"content\"}, ...]}")
      ->required();
  chat->add_flag("--add-generation-prompt", opts->generation_prompt, "End with the assistant turn's header");
  return {app, [opts, chat] {
            if (chat->parsed()) {
              const ChatTemplate tmpl = ChatTemplate::from_tokenizer_config(opts->chat_config);
              std::ifstream in(opts->chat_input);
              MT_DATA_CHECK(in.is_open(), "{}: cannot open; check --input", opts->chat_input);
              std::string line;
              for (int64_t n = 1; std::getline(in, line); ++n) {
                const auto conv = nlohmann::ordered_json::parse(line, nullptr, false);
                MT_DATA_CHECK(conv.is_object() && conv.contains("messages") && conv["messages"].is_array(),
                              "{}:{}: not a JSON object with a \"messages\" array", opts->chat_input, n);
                fmt::print("{}\n", nlohmann::json(tmpl.render(conv["messages"], opts->generation_prompt)).dump());
              }
              return 0;
            }
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
