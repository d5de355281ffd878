// Text/JSONL files -> indexed dataset (rules in preprocess.h). Invariant: the token stream written
// is, per document in input order, encode(document text) followed by EOD — whatever the number of
// workers, because batches are numbered by the reader and written strictly in that order.
#include "data/preprocess.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <utility>

#include "data/byte_unicode.h"
#include "data/indexed_dataset.h"
#include "data/jsonl_field.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kSkippedShown = 5;  // FILE:LINE of the first skipped lines kept for the summary

// Index of the first byte of `s` that is not part of well-formed UTF-8 (utf8_next's rules: no
// overlong forms, no surrogates, nothing above U+10FFFF), or npos when all of it is valid.
size_t invalid_utf8_at(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t at = pos;
    if (utf8_next(s, pos) < 0) return at;
  }
  return std::string_view::npos;
}

bool is_blank(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t'; });
}

struct Batch {
  int64_t index = 0;
  std::vector<std::string> docs;     // the text, or the completion in prompt-completion mode
  std::vector<std::string> prompts;  // prompt-completion mode: docs[i]'s prompt
  int64_t bytes = 0;
};

struct EncodedBatch {
  std::vector<int32_t> tokens;  // every document's tokens, each followed by EOD
  std::vector<uint8_t> learned;  // prompt-completion mode: per token, whether the loss learns it
  std::vector<size_t> ends;     // end of document i in tokens
  int64_t bytes = 0;
  std::exception_ptr error;
};

struct Stopped {};  // thrown inside the reader thread when the pipeline is torn down

// [Note: preprocess pipeline] One reader thread fills numbered batches, worker threads encode
// them, the caller writes them in number order. in_flight_ (batches read but not yet written) is
// capped, so the reader blocks when the writer falls behind: memory stays bounded.
class Pipeline {
 public:
  Pipeline(const PreprocessOptions& options, const Tokenizer& tok)
      : options_(options),
        tok_(tok),
        max_in_flight_(2 * options.workers),
        pairs_(options.format == PreprocessFormat::prompt_completion),
        json_(pairs_ ? "completion" : options.json_key.value_or(""),
              pairs_ ? "--format prompt-completion reads \"prompt\" and \"completion\"" : "check --json-key"),
        prompt_json_("prompt", "--format prompt-completion reads \"prompt\" and \"completion\"") {}
  ~Pipeline() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  void start() {
    threads_.emplace_back([this] { read_all(); });
    for (int w = 0; w < options_.workers; ++w) threads_.emplace_back([this] { encode_loop(); });
  }

  // Next batch in reader order, or false when all were handed out; rethrows a worker's error.
  bool next(EncodedBatch& out) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_.count(next_) > 0 || (reading_done_ && next_ == total_batches_); });
    auto it = done_.find(next_);
    if (it == done_.end()) {
      if (reader_error_) std::rethrow_exception(reader_error_);
      return false;
    }
    out = std::move(it->second);
    done_.erase(it);
    ++next_;
    --in_flight_;
    lock.unlock();
    cv_.notify_all();
    if (out.error) std::rethrow_exception(out.error);
    return true;
  }

  // Valid once next() returned false (the reader has finished).
  int64_t skipped_lines() const { return skipped_lines_; }
  const std::vector<std::string>& skipped_first() const { return skipped_first_; }

 private:
  // --- reader thread ---
  void read_all() {
    try {
      for (const auto& path : options_.inputs) read_file(path);
      if (!batch_.docs.empty()) push_batch();
      std::lock_guard lock(mu_);
      reading_done_ = true;
      total_batches_ = batches_pushed_;
    } catch (const Stopped&) {
      return;
    } catch (...) {
      std::lock_guard lock(mu_);
      reader_error_ = std::current_exception();
      reading_done_ = true;
      total_batches_ = batches_pushed_;
    }
    cv_.notify_all();
  }

  void read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    MT_DATA_CHECK(in.is_open(), "preprocess: input file {} cannot be opened ({}); check the --input path",
                   path, std::strerror(errno));
    std::string doc, line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      const bool had_newline = !in.eof();  // getline hit EOF before a '\n': last line, unterminated
      if (options_.json_key || pairs_) {
        read_json_line(path, line_no, line);
        continue;
      }
      if (const size_t at = invalid_utf8_at(line); at != std::string_view::npos) {
        bad_line(path, line_no, fmt::format("invalid UTF-8 at byte {} of the line", at + 1));
        continue;
      }
      if ((options_.doc_separator && line == *options_.doc_separator) ||
          (options_.blank_line_docs && is_blank(line))) {
        add_document(doc);
        continue;
      }
      doc += line;
      if (had_newline) doc += '\n';
    }
    MT_DATA_CHECK(!in.bad(), "preprocess: reading input file {} failed at line {}", path, line_no + 1);
    add_document(doc);
  }

  void read_json_line(const std::string& path, int64_t line_no, std::string& line) {
    if (is_blank(line)) return;
    std::string doc, prompt, error;
    bool ok = json_.extract(line, doc, error) && (!pairs_ || prompt_json_.extract(line, prompt, error));
    if (ok && pairs_ && doc.empty())
      ok = false, error = "key \"completion\" holds an empty string: the pair has nothing to learn";
    if (!ok) {
      // A line with invalid UTF-8 fails in either parser; name the byte rather than the parser's view.
      if (const size_t at = invalid_utf8_at(line); at != std::string_view::npos)
        error = fmt::format("invalid UTF-8 at byte {} of the line", at + 1);
      bad_line(path, line_no, error);
      return;
    }
    add_document(doc, pairs_ ? &prompt : nullptr);
  }

  void bad_line(const std::string& path, int64_t line_no, const std::string& what) {
    MT_DATA_CHECK(options_.skip_bad_lines, "preprocess: {}:{}: {}; fix the input, or use --skip-bad-lines "
                   "to skip such lines", path, line_no, what);
    ++skipped_lines_;
    if (skipped_first_.size() < kSkippedShown) skipped_first_.push_back(fmt::format("{}:{}", path, line_no));
  }

  // Moves a non-empty `doc` (with its PROMPT in prompt-completion mode) into the current batch and
  // clears it.
  void add_document(std::string& doc, std::string* prompt = nullptr) {
    if (doc.empty()) return;
    const auto size = static_cast<int64_t>(doc.size() + (prompt != nullptr ? prompt->size() : 0));
    if (!batch_.docs.empty() && batch_.bytes + size > options_.batch_bytes) push_batch();
    if (prompt != nullptr) batch_.prompts.push_back(std::move(*prompt));
    batch_.docs.push_back(std::move(doc));
    batch_.bytes += size;
    doc.clear();
    if (batch_.bytes >= options_.batch_bytes) push_batch();
  }

  void push_batch() {
    batch_.index = batches_pushed_;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || in_flight_ < max_in_flight_; });
      if (stop_) throw Stopped{};
      todo_.push_back(std::move(batch_));
      ++in_flight_;
      ++batches_pushed_;
    }
    cv_.notify_all();
    batch_ = Batch{};
  }

  // --- worker threads ---
  void encode_loop() {
    for (;;) {
      Batch batch;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !todo_.empty() || reading_done_; });
        if (stop_ || todo_.empty()) return;
        batch = std::move(todo_.front());
        todo_.pop_front();
      }
      EncodedBatch out;
      out.bytes = batch.bytes;
      try {
        out.ends.reserve(batch.docs.size());
        const int32_t eod = tok_.eod_id();
        for (size_t d = 0; d < batch.docs.size(); ++d) {
          if (pairs_) {
            const auto prompt = tok_.encode(batch.prompts[d]);
            out.tokens.insert(out.tokens.end(), prompt.begin(), prompt.end());
            out.learned.resize(out.tokens.size(), 0);
          }
          auto ids = tok_.encode(batch.docs[d]);
          out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
          out.tokens.push_back(eod);
          out.ends.push_back(out.tokens.size());
          if (pairs_) out.learned.resize(out.tokens.size(), 1);
        }
      } catch (...) {
        out.error = std::current_exception();
      }
      {
        std::lock_guard lock(mu_);
        done_.emplace(batch.index, std::move(out));
      }
      cv_.notify_all();
    }
  }

  const PreprocessOptions& options_;
  const Tokenizer& tok_;
  const int64_t max_in_flight_;
  const bool pairs_;  // prompt-completion mode
  JsonlField json_, prompt_json_;  // reader thread only
  std::vector<std::thread> threads_;

  std::mutex mu_;
  std::condition_variable cv_;  // any change of the state below
  bool stop_ = false;
  std::deque<Batch> todo_;
  std::map<int64_t, EncodedBatch> done_;
  int64_t in_flight_ = 0;
  int64_t batches_pushed_ = 0;
  bool reading_done_ = false;
  int64_t total_batches_ = -1;
  std::exception_ptr reader_error_;
  int64_t next_ = 0;  // writer side: the next batch to write

  // Reader-thread state; read by the caller only after the reader finished.
  Batch batch_;
  int64_t skipped_lines_ = 0;
  std::vector<std::string> skipped_first_;
};

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
  const bool pairs = options.format == PreprocessFormat::prompt_completion;
  MT_DATA_CHECK(!pairs || !(options.json_key || options.doc_separator || options.blank_line_docs),
                "preprocess: --format prompt-completion reads the keys \"prompt\" and \"completion\" of each "
                "JSONL line; drop --json-key/--doc-separator/--blank-line-docs");
  auto tokenizer = make_tokenizer(options.tokenizer);
  // Fail on a missing input before creating any output file.
  for (const auto& path : options.inputs) {
    std::ifstream probe(path, std::ios::binary);
    MT_DATA_CHECK(probe.is_open(), "preprocess: input file {} cannot be opened ({}); check the "
                   "--input path", path, std::strerror(errno));
  }

  PreprocessStats stats;
  IndexedDatasetWriter writer(options.output_prefix, smallest_token_dtype(tokenizer->vocab_size()), pairs);
  {
    Progress progress(options.progress);
    Pipeline pipeline(options, *tokenizer);
    pipeline.start();
    EncodedBatch batch;
    while (pipeline.next(batch)) {
      size_t begin = 0;
      const std::span<const int32_t> tokens(batch.tokens);
      const std::span<const uint8_t> learned(batch.learned);
      for (size_t end : batch.ends) {
        if (pairs)
          writer.add_document(tokens.subspan(begin, end - begin), learned.subspan(begin, end - begin));
        else
          writer.add_document(tokens.subspan(begin, end - begin));
        begin = end;
      }
      stats.documents += static_cast<int64_t>(batch.ends.size());
      stats.tokens += static_cast<int64_t>(batch.tokens.size());
      stats.bytes += batch.bytes;
      progress.update(stats);
    }
    stats.skipped_lines = pipeline.skipped_lines();
    stats.skipped_first = pipeline.skipped_first();
  }
  const char* mode = pairs               ? " (with --format prompt-completion)"
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
  if (s.skipped_lines > 0) {
    out += fmt::format(", {} bad lines skipped ({}{})", s.skipped_lines, fmt::join(s.skipped_first, ", "),
                       s.skipped_lines > static_cast<int64_t>(s.skipped_first.size()) ? ", ..." : "");
  }
  return out;
}

}  // namespace megatrain
