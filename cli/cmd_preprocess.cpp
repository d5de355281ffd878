// `megatrain preprocess`: command-line parsing only; the work is data/preprocess.cpp.
// Invariant: the options are parsed into one PreprocessOptions owned by the runner.
#include <fmt/format.h>

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
                  "\"completion\"}, the completion learned (writes PREFIX.lossmask too)")
      ->check(CLI::IsMember({"text", "prompt-completion"}))
      ->capture_default_str();
  app->add_option("--workers", opts->workers, "Tokenizer threads; the output is the same for any number")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app->add_flag("--skip-bad-lines", opts->skip_bad_lines,
                "Skip (and count) lines with invalid UTF-8 or bad JSON instead of failing");
  app->add_flag("--progress", opts->progress, "Print progress on stderr (default only when it is a terminal)");
  return Command{app, [opts, separator, sep_opt, json_key, key_opt, format] {
                   if (*format == "prompt-completion") opts->format = PreprocessFormat::prompt_completion;
                   if (sep_opt->count() > 0) opts->doc_separator = *separator;
                   if (key_opt->count() > 0) opts->json_key = *json_key;
                   PreprocessStats s = preprocess(*opts);
                   fmt::print("preprocess: {} -> {}.bin/.idx{}\n", preprocess_summary(s), opts->output_prefix,
                              opts->format == PreprocessFormat::prompt_completion ? "/.lossmask" : "");
                   return 0;
                 }};
}

}  // namespace megatrain
