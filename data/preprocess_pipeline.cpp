// The preprocess threads (see preprocess_pipeline.h). Invariant: the token stream taken is, per
// document in input order, what its format's encoder makes of it — whatever the number of workers,
// because batches are numbered by the reader and taken strictly in that order.
#include "data/preprocess_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>
#include <utility>

#include "data/byte_unicode.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

bool is_blank(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t'; });
}

bool jsonl_format(const PreprocessOptions& o) { return o.json_key || o.format != PreprocessFormat::documents; }

const char* pairs_hint = "--format prompt-completion reads \"prompt\" and \"completion\"";

// A bad line at WHERE (FILE:LINE): DataError saying WHAT, unless SKIP — then counted in COUNT and,
// among the first kSkippedShown, listed in FIRST. The reader's lines and the workers' alike.
void skip_or_refuse(bool skip, const std::string& where, const std::string& what, int64_t& count,
                    std::vector<std::string>& first) {
  MT_DATA_CHECK(skip, "preprocess: {}: {}; fix the input, or use --skip-bad-lines to skip such lines", where, what);
  ++count;
  if (first.size() < kSkippedShown) first.push_back(where);
}

}  // namespace

PreprocessPipeline::PreprocessPipeline(const PreprocessOptions& options, const Tokenizer& tok)
    : options_(options),
      tok_(tok),
      max_in_flight_(2 * options.workers),
      json_(options.format == PreprocessFormat::prompt_completion ? "completion" : options.json_key.value_or(""),
            options.format == PreprocessFormat::prompt_completion ? pairs_hint : "check --json-key"),
      prompt_json_("prompt", pairs_hint) {
  // Built here, so that an unusable chat template is reported by the caller's thread.
  for (int w = 0; w < options.workers; ++w) encoders_.push_back(make_document_encoder(options, tok));
}

PreprocessPipeline::~PreprocessPipeline() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void PreprocessPipeline::start() {
  threads_.emplace_back([this] { read_all(); });
  for (auto& encoder : encoders_) threads_.emplace_back([this, e = encoder.get()] { encode_loop(*e); });
}

bool PreprocessPipeline::next(EncodedBatch& out) {
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

// --- reader thread ---

void PreprocessPipeline::read_all() {
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

void PreprocessPipeline::read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_DATA_CHECK(in.is_open(), "preprocess: input file {} cannot be opened ({}); check the --input path", path,
                std::strerror(errno));
  ReadDocument doc;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const bool had_newline = !in.eof();  // getline hit EOF before a '\n': last line, unterminated
    if (jsonl_format(options_)) {
      read_json_line(path, line_no, line);
      continue;
    }
    if (const size_t at = invalid_utf8_at(line); at != std::string_view::npos) {
      bad_line(path, line_no, fmt::format("invalid UTF-8 at byte {} of the line", at + 1));
      continue;
    }
    if ((options_.doc_separator && line == *options_.doc_separator) || (options_.blank_line_docs && is_blank(line))) {
      add_document(doc);
      continue;
    }
    doc.text += line;
    if (had_newline) doc.text += '\n';
  }
  MT_DATA_CHECK(!in.bad(), "preprocess: reading input file {} failed at line {}", path, line_no + 1);
  add_document(doc);
}

void PreprocessPipeline::read_json_line(const std::string& path, int64_t line_no, std::string& line) {
  if (is_blank(line)) return;
  ReadDocument doc;
  doc.origin = fmt::format("{}:{}", path, line_no);
  if (options_.format == PreprocessFormat::chat) {  // parsed by the worker, which renders it
    doc.text = std::move(line);
    add_document(doc);
    return;
  }
  const bool pairs = options_.format == PreprocessFormat::prompt_completion;
  std::string error;
  bool ok = json_.extract(line, doc.text, error) && (!pairs || prompt_json_.extract(line, doc.prompt, error));
  if (ok && pairs && doc.text.empty())
    ok = false, error = "key \"completion\" holds an empty string: the pair has nothing to learn";
  if (!ok) {
    // A line with invalid UTF-8 fails in either parser; name the byte rather than the parser's view.
    if (const size_t at = invalid_utf8_at(line); at != std::string_view::npos)
      error = fmt::format("invalid UTF-8 at byte {} of the line", at + 1);
    bad_line(path, line_no, error);
    return;
  }
  add_document(doc);
}

void PreprocessPipeline::bad_line(const std::string& path, int64_t line_no, const std::string& what) {
  skip_or_refuse(options_.skip_bad_lines, fmt::format("{}:{}", path, line_no), what, skipped_lines_, skipped_first_);
}

// Moves a non-empty DOC into the current batch and clears it.
void PreprocessPipeline::add_document(ReadDocument& doc) {
  if (doc.text.empty()) return;
  const auto size = static_cast<int64_t>(doc.text.size() + doc.prompt.size());
  if (!batch_.docs.empty() && batch_.bytes + size > options_.batch_bytes) push_batch();
  batch_.docs.push_back(std::move(doc));
  batch_.bytes += size;
  doc = ReadDocument{};
  if (batch_.bytes >= options_.batch_bytes) push_batch();
}

void PreprocessPipeline::push_batch() {
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

void PreprocessPipeline::encode_loop(const DocumentEncoder& encoder) {
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
      encode_batch(encoder, batch, out);
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

void PreprocessPipeline::encode_batch(const DocumentEncoder& encoder, const Batch& batch, EncodedBatch& out) const {
  const auto limit = static_cast<size_t>(options_.max_tokens);
  out.ends.reserve(batch.docs.size());
  for (const ReadDocument& doc : batch.docs) {
    const size_t start = out.tokens.size();
    try {
      encoder.encode(doc, out.tokens, out.learned);
      const size_t n = out.tokens.size() - start;
      if (limit > 0 && n > limit) {
        MT_DATA_CHECK(options_.truncate,
                      "the document is {} tokens (its EOD included), more than --max-tokens {}; "
                      "shorten it, raise --max-tokens, or cut such documents with --truncate",
                      n, limit);
        out.tokens[start + limit - 1] = out.tokens.back();  // the EOD, after the first limit - 1 tokens
        out.tokens.resize(start + limit);
        if (encoder.masks()) {
          out.learned[start + limit - 1] = out.learned.back();
          out.learned.resize(start + limit);
        }
        ++out.truncated;
      }
    } catch (const DataError& e) {
      if (doc.origin.empty()) throw;
      out.tokens.resize(start);
      if (encoder.masks()) out.learned.resize(start);
      skip_or_refuse(options_.skip_bad_lines, doc.origin, e.what(), out.skipped, out.skipped_first);
      continue;
    }
    out.ends.push_back(out.tokens.size());
  }
}

}  // namespace megatrain
