// `megatrain preprocess`: command-line parsing only; the work is data/preprocess.cpp.
// Invariant: the options are parsed into one PreprocessOptions owned by the runner.
#include <fmt/format.h>

#include <memory>

#include "data/preprocess.h"
#include "trainer/commands.h"

namespace megatrain {

Command add_preprocess_command(CLI::App& root) {
  auto* app = root.add_subcommand(
      "preprocess", "Tokenize text files into a Megatron indexed dataset (PREFIX.bin + PREFIX.idx)");
  auto opts = std::make_shared<PreprocessOptions>();
  auto separator = std::make_shared<std::string>();
  app->add_option("--input", opts->inputs, "Text files; each is one document unless --doc-separator")
      ->required();
  app->add_option("--tokenizer", opts->tokenizer, "Tokenizer spec (\"bytes\")")->capture_default_str();
  app->add_option("--output-prefix", opts->output_prefix, "Writes PREFIX.bin and PREFIX.idx")->required();
  auto* sep_opt = app->add_option("--doc-separator", *separator,
                                  "A line exactly equal to this ends a document (\"%\" for fortune files)");
  return Command{app, [opts, separator, sep_opt] {
                   if (sep_opt->count() > 0) opts->doc_separator = *separator;
                   PreprocessStats s = preprocess(*opts);
                   fmt::print("preprocess: {} documents, {} tokens, {} bytes, {:.3f} s -> {}.bin/.idx\n",
                              s.documents, s.tokens, s.bytes, s.seconds, opts->output_prefix);
                   return 0;
                 }};
}

}  // namespace megatrain
