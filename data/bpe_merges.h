// The merge table of byte-level BPE, and the per-thread cache of merged words. Invariant: apply
// only joins adjacent symbols, so the bytes its output stands for are the bytes of its input.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megatrain {

// BPE merge rules: (left id, right id) -> (rank, merged id), in an open-addressing hash table
// (linear probing, load factor <= 1/2) that apply reads without locks from many threads.
class MergeTable {
 public:
  // A later rule for the same pair replaces the earlier one (as HF's merge map does).
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // Merges `symbols` (one id per byte) and appends the resulting ids to `out`.
  // [Note: BPE merge order] Repeatedly merge the adjacent pair of lowest rank, the leftmost one
  // on ties, until no adjacent pair has a rule (HF's BPE::merge_word; same result as GPT-2's).
  void apply(std::span<const int32_t> symbols, std::vector<int32_t>& out) const;

 private:
  struct Slot {
    uint64_t key = kEmpty;  // (left << 32) | right
    int32_t rank = 0, merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair of ids < 2^31 has this key

  const Slot* find(int32_t left, int32_t right) const;
  void apply_short(std::span<const int32_t> symbols, std::vector<int32_t>& out) const;
  void apply_long(std::span<const int32_t> symbols, std::vector<int32_t>& out) const;

  std::vector<Slot> slots_;  // size 0 or a power of two
  size_t size_ = 0;          // occupied slots
};

// Word -> ids of the words this thread encoded last, for one tokenizer (the owner, a serial
// number from new_owner, never reused). One cache per thread, so encode takes no lock. An
// open-addressing table (linear probing) of kSlots 16-byte slots, each pointing at one arena entry
// that holds the word's bytes followed by its ids, so a hit reads two cache lines. Emptied when it
// holds kSlots / 2 words, so its memory is bounded.
class WordCache {
 public:
  static constexpr size_t kSlots = size_t{1} << 17;
  static constexpr size_t kMaxWordBytes = 64;  // insert ignores longer words
  static uint64_t new_owner();
  // This thread's cache, emptied first if it last served another owner.
  static WordCache& of(uint64_t owner);
  // Appends the ids of `word` to `out` and returns true, or returns false if it is not cached.
  bool find(std::string_view word, std::vector<int32_t>& out) const;
  void insert(std::string_view word, std::span<const int32_t> ids);

 private:
  struct Slot {
    uint64_t hash = 0;   // 0: empty (hash_of never returns 0)
    uint32_t entry = 0;  // offset of the word's entry in arena_
    uint16_t word_size = 0, id_count = 0;
  };
  static uint64_t hash_of(std::string_view word);
  void clear();

  uint64_t owner_ = 0;
  std::vector<Slot> slots_;  // empty until the first insert, then kSlots
  size_t size_ = 0;
  std::string arena_;  // entries: word bytes, then id_count int32 ids (unaligned)
};

}  // namespace megatrain
