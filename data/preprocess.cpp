// Text/JSONL files -> indexed dataset (rules in preprocess.h): the options checked, the pipeline's
// batches (data/preprocess_pipeline.h) written in the order it hands them out, and the summary.
#include "data/preprocess.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/preprocess_pipeline.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

using Clock = std::chrono::steady_clock;

const char* format_flag(const PreprocessOptions& o) {
  return o.format == PreprocessFormat::chat ? "--format chat" : "--format prompt-completion";
}

class Progress {
 public:
  explicit Progress(bool requested)
      : tty_(isatty(fileno(stderr)) != 0), enabled_(requested || tty_), start_(Clock::now()), last_(start_) {}
  ~Progress() {
    if (printed_ && tty_) std::fputc('\n', stderr);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(const PreprocessStats& s) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(500)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double mb = static_cast<double>(s.bytes) / 1e6;
    fmt::print(stderr, "{}preprocess: {} documents, {:.1f} MB, {:.0f} docs/s, {:.1f} MB/s{}", tty_ ? "\r" : "",
               s.documents, mb, static_cast<double>(s.documents) / secs, mb / secs, tty_ ? "\x1b[K" : "\n");
    std::fflush(stderr);
    printed_ = true;
  }

 private:
  bool tty_, enabled_;
  Clock::time_point start_, last_;
  bool printed_ = false;
};

}  // namespace

PreprocessStats preprocess(const PreprocessOptions& options) {
  const auto start = Clock::now();
  MT_DATA_CHECK(!options.inputs.empty(), "preprocess: no --input files given");
  MT_DATA_CHECK(!options.output_prefix.empty(), "preprocess: --output-prefix is empty; give a path "
                 "prefix such as data/corpus");
  MT_DATA_CHECK(options.workers >= 1 && options.workers <= 1024, "preprocess: --workers {} is out of range; "
                 "give 1 to 1024", options.workers);
  MT_DATA_CHECK(options.batch_bytes > 0, "preprocess: batch size {} must be positive", options.batch_bytes);
  MT_DATA_CHECK(!(options.doc_separator && options.blank_line_docs), "preprocess: --doc-separator and "
                 "--blank-line-docs both set; choose one");
  MT_DATA_CHECK(!(options.json_key && (options.doc_separator || options.blank_line_docs)), "preprocess: "
                 "--json-key reads one document per JSONL line; drop --doc-separator/--blank-line-docs");
  MT_DATA_CHECK(!options.json_key || !options.json_key->empty(), "preprocess: --json-key is empty; give "
                 "the key of the document text, such as text");
  const bool masked = options.format != PreprocessFormat::documents;
  MT_DATA_CHECK(!masked || !(options.json_key || options.doc_separator || options.blank_line_docs),
                "preprocess: {} reads JSONL lines of its own keys; drop --json-key/--doc-separator/"
                "--blank-line-docs", format_flag(options));
  MT_DATA_CHECK((options.format == PreprocessFormat::chat) == !options.chat_config.empty(), "preprocess: {}",
                options.chat_config.empty() ? "--format chat needs --tokenizer-config, the tokenizer_config.json "
                                              "holding the model's chat_template"
                                            : "--tokenizer-config is read by --format chat only; drop it");
  MT_DATA_CHECK(options.max_tokens >= 0, "preprocess: --max-tokens {} is negative; give 0 (no limit) or more "
                "than 1", options.max_tokens);
  MT_DATA_CHECK(options.max_tokens != 1, "preprocess: --max-tokens 1 leaves room for the EOD only; give 2 or more");
  MT_DATA_CHECK(options.max_tokens == 0 || masked || options.json_key, "preprocess: --max-tokens limits the "
                "documents of JSONL lines (--json-key, --format prompt-completion or chat); text documents are "
                "not cut");
  MT_DATA_CHECK(!options.truncate || options.max_tokens > 0, "preprocess: --truncate cuts documents to "
                "--max-tokens; give --max-tokens too");
  auto tokenizer = make_tokenizer(options.tokenizer);
  // Fail on a missing input before creating any output file.
  for (const auto& path : options.inputs) {
    std::ifstream probe(path, std::ios::binary);
    MT_DATA_CHECK(probe.is_open(), "preprocess: input file {} cannot be opened ({}); check the "
                   "--input path", path, std::strerror(errno));
  }

  PreprocessStats stats;
  IndexedDatasetWriter writer(options.output_prefix, smallest_token_dtype(tokenizer->vocab_size()), masked);
  {
    Progress progress(options.progress);
    PreprocessPipeline pipeline(options, *tokenizer);
    pipeline.start();
    EncodedBatch batch;
    std::vector<std::string> worker_skipped;  // FILE:LINE of lines the workers dropped
    while (pipeline.next(batch)) {
      size_t begin = 0;
      const std::span<const int32_t> tokens(batch.tokens);
      const std::span<const uint8_t> learned(batch.learned);
      for (size_t end : batch.ends) {
        if (masked)
          writer.add_document(tokens.subspan(begin, end - begin), learned.subspan(begin, end - begin));
        else
          writer.add_document(tokens.subspan(begin, end - begin));
        begin = end;
      }
      stats.documents += static_cast<int64_t>(batch.ends.size());
      stats.tokens += static_cast<int64_t>(batch.tokens.size());
      stats.bytes += batch.bytes;
      stats.truncated += batch.truncated;
      stats.skipped_lines += batch.skipped;
      worker_skipped.insert(worker_skipped.end(), batch.skipped_first.begin(), batch.skipped_first.end());
      progress.update(stats);
    }
    stats.skipped_lines += pipeline.skipped_lines();
    stats.skipped_first = pipeline.skipped_first();
    for (auto& where : worker_skipped)
      if (stats.skipped_first.size() < kSkippedShown) stats.skipped_first.push_back(std::move(where));
  }
  const char* mode = options.format == PreprocessFormat::chat ? " (with --format chat)"
                     : masked               ? " (with --format prompt-completion)"
                     : options.json_key ? " (with --json-key)"
                     : options.doc_separator ? " (with --doc-separator)"
                     : options.blank_line_docs ? " (with --blank-line-docs)"
                                               : "";
  MT_DATA_CHECK(stats.documents > 0, "preprocess: the inputs hold no non-empty document{}; check "
                 "the --input files", mode);
  writer.finalize();
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

std::string preprocess_summary(const PreprocessStats& s) {
  const double mbps = s.seconds > 0 ? static_cast<double>(s.bytes) / 1e6 / s.seconds : 0.0;
  std::string out = fmt::format("{} documents, {} tokens, {} bytes, {:.3f} s, {:.1f} MB/s", s.documents,
                                s.tokens, s.bytes, s.seconds, mbps);
  if (s.truncated > 0) out += fmt::format(", {} cut to --max-tokens", s.truncated);
  if (s.skipped_lines > 0) {
    out += fmt::format(", {} bad lines skipped ({}{})", s.skipped_lines, fmt::join(s.skipped_first, ", "),
                       s.skipped_lines > static_cast<int64_t>(s.skipped_first.size()) ? ", ..." : "");
  }
  return out;
}

}  // namespace megatrain
