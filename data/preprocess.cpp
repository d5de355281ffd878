// Text files -> indexed dataset (rules in preprocess.h). Invariant: the token stream written is,
// per document in input order, encode(document text) followed by EOD.
#include "data/preprocess.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

class DocumentSink {
 public:
  DocumentSink(const Tokenizer& tok, IndexedDatasetWriter& writer, PreprocessStats& stats)
      : tok_(tok), writer_(writer), stats_(stats) {}

  void add(const std::string& text) {
    if (text.empty()) return;
    ids_ = tok_.encode(text);
    ids_.push_back(tok_.eod_id());
    writer_.add_document(ids_);
    stats_.documents += 1;
    stats_.tokens += static_cast<int64_t>(ids_.size());
    stats_.bytes += static_cast<int64_t>(text.size());
  }

 private:
  const Tokenizer& tok_;
  IndexedDatasetWriter& writer_;
  PreprocessStats& stats_;
  std::vector<int32_t> ids_;
};

void read_file(const std::string& path, const std::optional<std::string>& separator, DocumentSink& sink) {
  std::ifstream in(path, std::ios::binary);
  MT_INPUT_CHECK(in.is_open(), "preprocess: input file {} cannot be opened ({}); check the --input path",
                 path, std::strerror(errno));
  std::string doc;
  if (!separator) {
    doc.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    MT_INPUT_CHECK(!in.bad(), "preprocess: reading input file {} failed", path);
    sink.add(doc);
    return;
  }
  std::string line;
  while (std::getline(in, line)) {
    const bool had_newline = !in.eof();  // getline hit EOF before a '\n': last line, unterminated
    if (line == *separator) {
      sink.add(doc);
      doc.clear();
      continue;
    }
    doc += line;
    if (had_newline) doc += '\n';
  }
  MT_INPUT_CHECK(!in.bad(), "preprocess: reading input file {} failed", path);
  sink.add(doc);
}

}  // namespace

PreprocessStats preprocess(const PreprocessOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MT_INPUT_CHECK(!options.inputs.empty(), "preprocess: no --input files given");
  MT_INPUT_CHECK(!options.output_prefix.empty(), "preprocess: --output-prefix is empty; give a path "
                 "prefix such as data/corpus");
  auto tokenizer = make_tokenizer(options.tokenizer);
  // Fail on a missing input before creating any output file.
  for (const auto& path : options.inputs) {
    std::ifstream probe(path, std::ios::binary);
    MT_INPUT_CHECK(probe.is_open(), "preprocess: input file {} cannot be opened ({}); check the "
                   "--input path", path, std::strerror(errno));
  }

  PreprocessStats stats;
  IndexedDatasetWriter writer(options.output_prefix, smallest_token_dtype(tokenizer->vocab_size()));
  DocumentSink sink(*tokenizer, writer, stats);
  for (const auto& path : options.inputs) read_file(path, options.doc_separator, sink);
  MT_INPUT_CHECK(stats.documents > 0, "preprocess: the inputs hold no non-empty document{}; check "
                 "the --input files", options.doc_separator ? " (with --doc-separator)" : "");
  writer.finalize();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace megatrain
