// The threads of `megatrain preprocess`: one reader thread reads documents in input order into
// numbered batches, `workers` threads encode batches (each with its own DocumentEncoder), and the
// caller takes the encoded batches back in number order (next()). Rules of the formats and of bad
// lines: preprocess.h.
//
// [Note: preprocess pipeline] in_flight_ (batches read but not yet taken) is capped at 2·workers,
// so the reader blocks when the writer falls behind and memory stays bounded whatever the corpus
// size; since batches are taken strictly in reader order, the output does not depend on the number
// of workers.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/document_encoder.h"
#include "data/jsonl_field.h"
#include "data/preprocess.h"

namespace megatrain {

class Tokenizer;

constexpr size_t kSkippedShown = 5;  // FILE:LINE of the first skipped lines kept for the summary

struct EncodedBatch {
  std::vector<int32_t> tokens;   // every document's tokens, each followed by EOD
  std::vector<uint8_t> learned;  // the masked formats: per token, whether the loss learns it
  std::vector<size_t> ends;      // end of document i in tokens
  int64_t bytes = 0;
  int64_t skipped = 0, truncated = 0;      // documents the workers dropped (skip_bad_lines) or cut
  std::vector<std::string> skipped_first;  // FILE:LINE of the first few dropped
  std::exception_ptr error;
};

class PreprocessPipeline {
 public:
  PreprocessPipeline(const PreprocessOptions& options, const Tokenizer& tok);
  ~PreprocessPipeline();
  PreprocessPipeline(const PreprocessPipeline&) = delete;
  PreprocessPipeline& operator=(const PreprocessPipeline&) = delete;

  void start();
  // Next batch in reader order, or false when all were handed out; rethrows a worker's or the
  // reader's error.
  bool next(EncodedBatch& out);

  // The reader's bad lines; valid once next() returned false.
  int64_t skipped_lines() const { return skipped_lines_; }
  const std::vector<std::string>& skipped_first() const { return skipped_first_; }

 private:
  struct Batch {
    int64_t index = 0;
    std::vector<ReadDocument> docs;
    int64_t bytes = 0;
  };
  struct Stopped {};  // thrown inside the reader thread when the pipeline is torn down

  // reader thread
  void read_all();
  void read_file(const std::string& path);
  void read_json_line(const std::string& path, int64_t line_no, std::string& line);
  void bad_line(const std::string& path, int64_t line_no, const std::string& what);
  void add_document(ReadDocument& doc);
  void push_batch();
  // worker threads
  void encode_loop(const DocumentEncoder& encoder);
  void encode_batch(const DocumentEncoder& encoder, const Batch& batch, EncodedBatch& out) const;

  const PreprocessOptions& options_;
  const Tokenizer& tok_;
  const int64_t max_in_flight_;
  JsonlField json_, prompt_json_;                           // reader thread only
  std::vector<std::unique_ptr<DocumentEncoder>> encoders_;  // one per worker thread
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
  int64_t next_ = 0;  // writer side: the next batch to take

  // Reader-thread state; read by the caller only after the reader finished.
  Batch batch_;
  int64_t skipped_lines_ = 0;
  std::vector<std::string> skipped_first_;
};

}  // namespace megatrain
