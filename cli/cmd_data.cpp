// `megatrain data inspect PREFIX [--doc N] [--decode --tokenizer T]`: a dataset's counts (documents,
// sequences, tokens, dtype) and the token ids — or the decoded text — of document N.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace megatrain {

Command add_data_command(CLI::App& root) {
  struct Options {
    std::string prefix, tokenizer = "bytes";
    int64_t doc = -1;
    bool decode = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* data = root.add_subcommand("data", "Look at datasets");
  data->require_subcommand(1);
  CLI::App* app = data->add_subcommand("inspect", "Print a dataset's counts and, with --doc, one document");
  app->add_option("prefix", opts->prefix, "Dataset PREFIX (PREFIX.bin + PREFIX.idx)")->required();
  app->add_option("--doc", opts->doc, "Print document N (0-based)");
  app->add_flag("--decode", opts->decode, "Print the document as text instead of ids");
  app->add_option("--tokenizer", opts->tokenizer, "Tokenizer for --decode: \"bytes\" or a tokenizer.json path")
      ->capture_default_str();
  return {data, [opts] {
            const IndexedDataset ds = IndexedDataset::open(opts->prefix);
            fmt::print("{}: {} documents, {} sequences, {} tokens, dtype {}\n", opts->prefix, ds.num_documents(),
                       ds.num_sequences(), ds.num_tokens(), token_dtype_name(ds.dtype()));
            if (opts->doc < 0) return 0;
            MT_INPUT_CHECK(opts->doc < ds.num_documents(), "--doc {}: {} has documents 0 … {}", opts->doc,
                           opts->prefix, ds.num_documents() - 1);
            const auto [first, last] = ds.document_sequences(opts->doc);
            const int64_t begin = ds.sequence_start(first);
            const int64_t end = last > first ? ds.sequence_start(last - 1) + ds.sequence_length(last - 1) : begin;
            std::vector<int32_t> ids(static_cast<size_t>(end - begin));
            ds.read_tokens(begin, end - begin, ids.data());
            if (opts->decode)
              fmt::print("{}\n", make_tokenizer(opts->tokenizer)->decode(ids));
            else
              fmt::print("document {} ({} tokens): {}\n", opts->doc, ids.size(), fmt::join(ids, " "));
            return 0;
          }};
}

}  // namespace megatrain
