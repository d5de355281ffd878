// Byte-level BPE training: word counting (streamed), then greedy pair merging with incremental
// pair counts. Pair counts live in a hash map; a lazy max-heap holds (count, pair) snapshots and
// stale entries (count no longer current) are skipped when popped. Each pair also lists the words
// it may occur in, so a merge only rescans those words.
#include "data/bpe_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "data/gpt2_split.h"
#include "data/byte_unicode.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

using Pair = uint64_t;
Pair make_pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t pair_left(Pair p) { return static_cast<int32_t>(p >> 32); }
int32_t pair_right(Pair p) { return static_cast<int32_t>(p & 0xffffffffu); }

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

// Splits `text` on the special tokens (leftmost, longest first) and counts the regex pieces of
// the text between them.
void count_words(std::string_view text, const std::vector<std::string>& specials, const Splitter& split,
                 std::vector<std::string_view>& pieces, std::unordered_map<std::string, int64_t>& counts) {
  while (!text.empty()) {
    size_t best = std::string_view::npos, best_len = 0;
    for (const std::string& s : specials) {
      const size_t at = text.find(s);
      if (at != std::string_view::npos && (at < best || (at == best && s.size() > best_len))) {
        best = at;
        best_len = s.size();
      }
    }
    const std::string_view plain = text.substr(0, best == std::string_view::npos ? text.size() : best);
    if (!plain.empty()) {
      pieces.clear();
      split.split_isolated(plain, pieces);
      for (std::string_view p : pieces) ++counts[std::string(p)];
    }
    if (best == std::string_view::npos) break;
    text.remove_prefix(best + best_len);
  }
}

class Trainer {
 public:
  explicit Trainer(std::vector<Word> words) : words_(std::move(words)) {
    for (int b = 0; b < 256; ++b) {
      spelling_.push_back(byte_symbol(static_cast<unsigned char>(b)));
      ids_.emplace(spelling_.back(), b);
    }
    for (size_t w = 0; w < words_.size(); ++w) add_pairs(static_cast<uint32_t>(w), +1);
    for (const auto& [pair, count] : counts_) heap_.push({count, pair});
    changed_.clear();
  }
  Trainer(const Trainer&) = delete;  // heap_'s comparator points at this object
  Trainer& operator=(const Trainer&) = delete;

  // Merges until `target` tokens exist or no pair occurs twice.
  void run(size_t target, std::vector<std::pair<std::string, std::string>>& merges) {
    while (spelling_.size() < target) {
      const auto best = pop_best();
      if (!best) break;
      merge(*best, merges);
    }
  }

  std::vector<std::string>& spelling() { return spelling_; }

 private:
  struct Entry {
    int64_t count;
    Pair pair;
  };
  struct Less {  // max-heap: higher count first, then smaller (left, right) spellings
    const Trainer* t;
    bool operator()(const Entry& x, const Entry& y) const {
      if (x.count != y.count) return x.count < y.count;
      const std::string& xl = t->spelling_[static_cast<size_t>(pair_left(x.pair))];
      const std::string& yl = t->spelling_[static_cast<size_t>(pair_left(y.pair))];
      if (xl != yl) return xl > yl;
      return t->spelling_[static_cast<size_t>(pair_right(x.pair))] >
             t->spelling_[static_cast<size_t>(pair_right(y.pair))];
    }
  };

  // Adds (sign +1) or removes (sign -1) the pairs of word w, weighted by its count.
  void add_pairs(uint32_t w, int sign) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const Pair p = make_pair_key(word.symbols[i], word.symbols[i + 1]);
      counts_[p] += sign * word.count;
      if (sign > 0) where_[p].push_back(w);
      changed_.insert(p);
    }
  }

  std::optional<Pair> pop_best() {
    while (!heap_.empty()) {
      const Entry e = heap_.top();
      heap_.pop();
      const auto it = counts_.find(e.pair);
      if (it == counts_.end() || it->second != e.count) continue;  // stale snapshot
      if (e.count < 2) return std::nullopt;
      return e.pair;
    }
    return std::nullopt;
  }

  void merge(Pair pair, std::vector<std::pair<std::string, std::string>>& merges) {
    const int32_t a = pair_left(pair), b = pair_right(pair);
    const std::string& left = spelling_[static_cast<size_t>(a)];
    const std::string& right = spelling_[static_cast<size_t>(b)];
    merges.emplace_back(left, right);
    std::string joined = left + right;
    int32_t c;
    if (const auto it = ids_.find(joined); it != ids_.end()) {
      c = it->second;  // another pair already spelled this token: reuse its id
    } else {
      c = static_cast<int32_t>(spelling_.size());
      ids_.emplace(joined, c);
      spelling_.push_back(std::move(joined));
    }

    std::vector<uint32_t> affected = std::move(where_[pair]);
    where_.erase(pair);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    changed_.clear();
    std::vector<int32_t> merged;
    for (const uint32_t w : affected) {
      std::vector<int32_t>& syms = words_[w].symbols;
      bool found = false;
      for (size_t i = 0; i + 1 < syms.size(); ++i)
        if (syms[i] == a && syms[i + 1] == b) {
          found = true;
          break;
        }
      if (!found) continue;
      add_pairs(w, -1);
      merged.clear();
      for (size_t i = 0; i < syms.size();) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          merged.push_back(c);
          i += 2;
        } else {
          merged.push_back(syms[i]);
          ++i;
        }
      }
      syms.swap(merged);
      add_pairs(w, +1);
    }
    counts_.erase(pair);
    for (const Pair p : changed_) {
      const auto it = counts_.find(p);
      if (it == counts_.end()) continue;
      if (it->second <= 0) {
        counts_.erase(it);
        where_.erase(p);
      } else {
        heap_.push({it->second, p});
      }
    }
  }

  std::vector<Word> words_;
  std::vector<std::string> spelling_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<Pair, int64_t> counts_;
  std::unordered_map<Pair, std::vector<uint32_t>> where_;
  std::unordered_set<Pair> changed_;
  std::priority_queue<Entry, std::vector<Entry>, Less> heap_{Less{this}};
};

}  // namespace

BpeTrainResult train_bpe(const BpeTrainOptions& opts) {
  MT_DATA_CHECK(!opts.inputs.empty(), "tokenizer train: no --input files given");
  std::unordered_set<std::string> seen;
  for (const std::string& s : opts.special_tokens) {
    MT_DATA_CHECK(!s.empty(), "tokenizer train: a --special token is empty");
    MT_DATA_CHECK(seen.insert(s).second, "tokenizer train: --special token '{}' is given twice", s);
  }
  const int64_t min_vocab = 257 + static_cast<int64_t>(opts.special_tokens.size());
  MT_DATA_CHECK(opts.vocab_size >= min_vocab,
                 "tokenizer train: --vocab-size {} is too small; it must be at least {} (256 byte tokens, "
                 "at least one merge, and {} special token(s))",
                 opts.vocab_size, min_vocab, opts.special_tokens.size());

  const Gpt2Splitter split;
  std::unordered_map<std::string, int64_t> counts;
  std::vector<std::string_view> pieces;
  for (const std::string& path : opts.inputs) {
    std::ifstream in(path, std::ios::binary);
    MT_DATA_CHECK(in.is_open(), "tokenizer train: cannot open input file '{}': {}", path, std::strerror(errno));
    std::string line;
    while (std::getline(in, line)) {
      if (!in.eof()) line.push_back('\n');
      count_words(line, opts.special_tokens, split, pieces, counts);
    }
    MT_DATA_CHECK(!in.bad(), "tokenizer train: reading input file '{}' failed", path);
  }

  // Deterministic word order (the result does not depend on it, but keep runs identical).
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  counts.clear();
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [text, count] : sorted) {
    Word w;
    w.count = count;
    w.symbols.reserve(text.size());
    for (const char ch : text) w.symbols.push_back(static_cast<unsigned char>(ch));
    words.push_back(std::move(w));
  }

  BpeTrainResult result;
  result.words = static_cast<int64_t>(words.size());
  Trainer trainer(std::move(words));
  trainer.run(static_cast<size_t>(opts.vocab_size) - opts.special_tokens.size(), result.merges);
  result.vocab = std::move(trainer.spelling());
  result.special_tokens = opts.special_tokens;
  return result;
}

void write_bpe_tokenizer_json(const BpeTrainResult& result, const std::string& path) {
  using nlohmann::ordered_json;
  const auto byte_level = [](bool add_prefix_space, bool trim_offsets) {
    return ordered_json{{"type", "ByteLevel"},
                        {"add_prefix_space", add_prefix_space},
                        {"trim_offsets", trim_offsets},
                        {"use_regex", true}};
  };
  ordered_json added = ordered_json::array();
  for (size_t i = 0; i < result.special_tokens.size(); ++i)
    added.push_back({{"id", result.vocab.size() + i},
                     {"content", result.special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  ordered_json vocab = ordered_json::object();
  for (size_t i = 0; i < result.vocab.size(); ++i) vocab[result.vocab[i]] = i;
  for (size_t i = 0; i < result.special_tokens.size(); ++i)
    vocab[result.special_tokens[i]] = result.vocab.size() + i;
  ordered_json merges = ordered_json::array();
  for (const auto& [l, r] : result.merges) merges.push_back(ordered_json::array({l, r}));

  ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level(false, true);
  j["post_processor"] = byte_level(true, false);
  j["decoder"] = byte_level(true, true);
  j["model"] = ordered_json{{"type", "BPE"},
                            {"dropout", nullptr},
                            {"unk_token", nullptr},
                            {"continuing_subword_prefix", nullptr},
                            {"end_of_word_suffix", nullptr},
                            {"fuse_unk", false},
                            {"byte_fallback", false},
                            {"ignore_merges", false},
                            {"vocab", std::move(vocab)},
                            {"merges", std::move(merges)}};

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MT_DATA_CHECK(out.is_open(), "tokenizer train: cannot write '{}': {}", tmp, std::strerror(errno));
    out << j.dump(2) << '\n';
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      MT_DATA_CHECK(false, "tokenizer train: writing '{}' failed (disk full?)", tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    MT_DATA_CHECK(false, "tokenizer train: cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err));
  }
}

}  // namespace megatrain
