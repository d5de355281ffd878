// `megatrain tokenize --tokenizer T [--decode]`: text on stdin → token ids (space-separated) on
// stdout, or with --decode ids → text. The everyday check of what a tokenizer does.
#include <fmt/format.h>

#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace megatrain {

Command add_tokenize_command(CLI::App& root) {
  struct Options {
    std::string tokenizer = "bytes";
    bool decode = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("tokenize", "Encode stdin to token ids (or --decode ids to text)");
  app->add_option("--tokenizer", opts->tokenizer, "\"bytes\" or a tokenizer.json path")->capture_default_str();
  app->add_flag("--decode", opts->decode, "Read whitespace-separated ids, print text");
  return {app, [opts] {
            const auto tok = make_tokenizer(opts->tokenizer);
            const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
            if (!opts->decode) {
              const auto ids = tok->encode(input);
              fmt::print("{}\n", fmt::join(ids, " "));
              return 0;
            }
            std::vector<int32_t> ids;
            std::istringstream in(input);
            for (std::string word; in >> word;) {
              size_t used = 0;
              long long v = -1;
              try {
                v = std::stoll(word, &used);
              } catch (const std::exception&) {
                used = 0;
              }
              MT_DATA_CHECK(used == word.size() && v >= 0 && v < tok->vocab_size(),
                             "tokenize --decode: '{}' is not a token id in [0, {}) of tokenizer {}", word,
                             tok->vocab_size(), opts->tokenizer);
              ids.push_back(static_cast<int32_t>(v));
            }
            fmt::print("{}", tok->decode(ids));
            return 0;
          }};
}

}  // namespace megatrain
