// `megatrain data inspect PREFIX [--doc N] [--decode --tokenizer T]`: a dataset's counts (documents,
// sequences, tokens, dtype; with a loss-mask companion, how many tokens are learned) and the token
// ids — or the decoded text — of document N; with a mask, its bits too (or, decoded, the learned
// text between ⟦ and ⟧).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

int64_t learned_tokens(const IndexedDataset& ds) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<uint8_t> bits(static_cast<size_t>(std::min(kChunk, ds.num_tokens())));
  int64_t learned = 0;
  for (int64_t at = 0; at < ds.num_tokens(); at += kChunk) {
    const int64_t n = std::min(kChunk, ds.num_tokens() - at);
    ds.read_loss_mask(at, n, bits.data());
    learned += std::count(bits.begin(), bits.begin() + n, uint8_t{1});
  }
  return learned;
}

// The text of IDS with each run of learned tokens between ⟦ and ⟧.
std::string marked_text(const Tokenizer& tok, const std::vector<int32_t>& ids, const std::vector<uint8_t>& learned) {
  std::string out;
  for (size_t t = 0; t < ids.size();) {
    size_t end = t;
    while (end < ids.size() && learned[end] == learned[t]) ++end;
    const std::string text = tok.decode(std::span(ids).subspan(t, end - t));
    out += learned[t] != 0 ? "⟦" + text + "⟧" : text;
    t = end;
  }
  return out;
}

}  // namespace

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
  app->add_flag("--decode", opts->decode, "Print the document as text instead of ids (learned text in ⟦ ⟧)");
  app->add_option("--tokenizer", opts->tokenizer, "Tokenizer for --decode: \"bytes\" or a tokenizer.json path")
      ->capture_default_str();
  return {data, [opts] {
            const IndexedDataset ds = IndexedDataset::open(opts->prefix);
            fmt::print("{}: {} documents, {} sequences, {} tokens, dtype {}\n", opts->prefix, ds.num_documents(),
                       ds.num_sequences(), ds.num_tokens(), token_dtype_name(ds.dtype()));
            if (ds.has_loss_mask()) {
              const int64_t learned = learned_tokens(ds);
              fmt::print("{}.lossmask: {} of {} tokens learned ({:.1f} %)\n", opts->prefix, learned, ds.num_tokens(),
                         ds.num_tokens() > 0 ? 100.0 * static_cast<double>(learned) / static_cast<double>(ds.num_tokens())
                                             : 0.0);
            }
            if (opts->doc < 0) return 0;
            MT_INPUT_CHECK(opts->doc < ds.num_documents(), "--doc {}: {} has documents 0 … {}", opts->doc,
                           opts->prefix, ds.num_documents() - 1);
            const auto [first, last] = ds.document_sequences(opts->doc);
            const int64_t begin = ds.sequence_start(first);
            const int64_t end = last > first ? ds.sequence_start(last - 1) + ds.sequence_length(last - 1) : begin;
            std::vector<int32_t> ids(static_cast<size_t>(end - begin));
            ds.read_tokens(begin, end - begin, ids.data());
            std::vector<uint8_t> learned(ids.size(), 1);
            if (ds.has_loss_mask()) ds.read_loss_mask(begin, end - begin, learned.data());
            if (opts->decode) {
              const auto tok = make_tokenizer(opts->tokenizer);
              fmt::print("{}\n", ds.has_loss_mask() ? marked_text(*tok, ids, learned) : tok->decode(ids));
            } else {
              fmt::print("document {} ({} tokens): {}\n", opts->doc, ids.size(), fmt::join(ids, " "));
              if (ds.has_loss_mask()) fmt::print("learned: {}\n", fmt::join(learned, " "));
            }
            return 0;
          }};
}

}  // namespace megatrain
