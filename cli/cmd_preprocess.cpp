// `megatrain preprocess`: command-line parsing only; the work is data/preprocess.cpp.
// Invariant: the options are parsed into one PreprocessOptions owned by the runner.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "data/preprocess.h"

namespace megatrain {

Command add_preprocess_command(CLI::App& root) {
  auto* app = root.add_subcommand(
      "preprocess", "Tokenize text or JSONL files into a Megatron indexed dataset (PREFIX.bin + PREFIX.idx)");
  auto opts = std::make_shared<PreprocessOptions>();
  auto separator = std::make_shared<std::string>();
  auto json_key = std::make_shared<std::string>();
  app->add_option("--input", opts->inputs,
                  "Text files (each one document unless --doc-separator/--blank-line-docs) or, with "
                  "--json-key, JSONL files")
      ->required();
  app->add_option("--tokenizer", opts->tokenizer, "Tokenizer spec (\"bytes\" or a tokenizer.json path)")
      ->capture_default_str();
  app->add_option("--output-prefix", opts->output_prefix, "Writes PREFIX.bin and PREFIX.idx")->required();
  auto* sep_opt = app->add_option("--doc-separator", *separator,
                                  "A line exactly equal to this ends a document (\"%\" for fortune files)");
  app->add_flag("--blank-line-docs", opts->blank_line_docs, "One or more blank lines end a document");
  auto* key_opt = app->add_option("--json-key", *json_key,
                                  "Inputs are JSONL: each line a JSON object whose string at KEY is a document");
  auto format = std::make_shared<std::string>("text");
  app->add_option("--format", *format,
                  "text: documents as the options above say; prompt-completion: JSONL lines {\"prompt\", "
                  "\"completion\"}, the completion learned; chat: JSONL lines {\"messages\": [...]} rendered with "
                  "the chat template, the assistant text learned (both write PREFIX.lossmask too)")
      ->check(CLI::IsMember({"text", "prompt-completion", "chat"}))
      ->capture_default_str();
  auto* config_opt = app->add_option("--tokenizer-config", opts->chat_config,
                                     "--format chat: the tokenizer_config.json holding chat_template (default: "
                                     "the one beside --tokenizer's tokenizer.json)");
  app->add_option("--max-tokens", opts->max_tokens,
                  "JSONL formats: a document over N tokens (EOD included) is a bad line, or cut with --truncate "
                  "(0: no limit)")
      ->capture_default_str();
  app->add_flag("--truncate", opts->truncate, "Cut documents over --max-tokens to their first N-1 tokens and EOD");
  app->add_option("--workers", opts->workers, "Tokenizer threads; the output is the same for any number")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app->add_flag("--skip-bad-lines", opts->skip_bad_lines,
                "Skip (and count) lines with invalid UTF-8 or bad JSON instead of failing");
  app->add_flag("--progress", opts->progress, "Print progress on stderr (default only when it is a terminal)");
  return Command{app, [opts, separator, sep_opt, json_key, key_opt, format, config_opt] {
                   if (*format == "prompt-completion") opts->format = PreprocessFormat::prompt_completion;
                   if (*format == "chat") opts->format = PreprocessFormat::chat;
                   if (*format == "chat" && config_opt->count() == 0 && opts->tokenizer != "bytes")
                     opts->chat_config =
                         (std::filesystem::path(opts->tokenizer).parent_path() / "tokenizer_config.json").string();
                   if (sep_opt->count() > 0) opts->doc_separator = *separator;
                   if (key_opt->count() > 0) opts->json_key = *json_key;
                   PreprocessStats s = preprocess(*opts);
                   fmt::print("preprocess: {} -> {}.bin/.idx{}\n", preprocess_summary(s), opts->output_prefix,
                              opts->format != PreprocessFormat::documents ? "/.lossmask" : "");
                   return 0;
                 }};
}

}  // namespace megatrain
