#include "data/bpe_merges.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <queue>

namespace megatrain {

namespace {
constexpr size_t kShortWord = 64;  // words up to this many symbols are merged by apply_short
constexpr int32_t kNoRule = std::numeric_limits<int32_t>::max();

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

size_t slot_of(uint64_t key, size_t mask) {
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;  // Fibonacci hashing
}
}  // namespace

void MergeTable::add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  if (2 * (size_ + 1) > slots_.size()) {  // keep the load factor <= 1/2
    std::vector<Slot> old(std::max<size_t>(64, 2 * slots_.size()));
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = slot_of(s.key, slots_.size() - 1);
      while (slots_[i].key != kEmpty) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
    }
  }
  const uint64_t key = pair_key(left, right);
  size_t i = slot_of(key, slots_.size() - 1);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & (slots_.size() - 1);
  if (slots_[i].key == kEmpty) ++size_;
  slots_[i] = {key, rank, merged};
}

const MergeTable::Slot* MergeTable::find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
    if (slots_[i].key == key) return &slots_[i];
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

void MergeTable::apply(std::span<const int32_t> ids, std::vector<int32_t>& out) const {
  if (ids.size() <= kShortWord) {
    apply_short(ids, out);
  } else {
    apply_long(ids, out);
  }
}

// [Note: BPE merge order] Short words: the symbols and the rule of each adjacent pair sit in
// arrays; each round takes the leftmost pair of lowest rank, merges it, closes the gap and
// looks up the (at most two) pairs that changed. O(n) per merge, no allocation.
void MergeTable::apply_short(std::span<const int32_t> ids, std::vector<int32_t>& out) const {
  std::array<int32_t, kShortWord> sym, rank, merged;  // rank[i], merged[i]: pair (i, i + 1)
  size_t n = ids.size();
  std::copy(ids.begin(), ids.end(), sym.begin());
  auto look_up = [&](size_t i) {
    const Slot* s = find(sym[i], sym[i + 1]);
    rank[i] = s != nullptr ? s->rank : kNoRule;
    merged[i] = s != nullptr ? s->merged : 0;
  };
  for (size_t i = 0; i + 1 < n; ++i) look_up(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoRule) break;
    sym[best] = merged[best];
    // Remove symbol best + 1 and pair (best, best + 1): pair best + 1 becomes pair best.
    std::copy(sym.begin() + best + 2, sym.begin() + n, sym.begin() + best + 1);
    if (best + 2 < n) {
      std::copy(rank.begin() + best + 2, rank.begin() + n - 1, rank.begin() + best + 1);
      std::copy(merged.begin() + best + 2, merged.begin() + n - 1, merged.begin() + best + 1);
    }
    --n;
    if (best + 1 < n) look_up(best);
    if (best > 0) look_up(best - 1);
  }
  out.insert(out.end(), sym.begin(), sym.begin() + n);
}

// [Note: BPE merge order] Long words: the symbols form a linked list; a heap holds candidate pairs
// ordered by (rank, position). An entry whose symbols have changed since it was pushed is stale
// and skipped. O(n log n).
void MergeTable::apply_long(std::span<const int32_t> ids, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;      // -1: absorbed into its left neighbour
    int prev, next;  // -1: none
  };
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int n = static_cast<int>(ids.size());
  std::vector<Symbol> symbols(n);
  for (int i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int pos) {
    const int next = symbols[pos].next;
    if (next < 0) return;
    if (const Slot* s = find(symbols[pos].id, symbols[next].id))
      heap.push({s->rank, pos, symbols[pos].id, symbols[next].id, s->merged});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = symbols[c.pos];
    if (s.id != c.left || s.next < 0 || symbols[s.next].id != c.right) continue;  // stale
    s.id = c.merged;
    symbols[s.next].id = -1;  // absorbed: every entry naming it is now stale
    s.next = symbols[s.next].next;
    if (s.next >= 0) symbols[s.next].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  for (int i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

uint64_t WordCache::new_owner() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

WordCache& WordCache::of(uint64_t owner) {
  thread_local WordCache cache;
  if (cache.owner_ != owner) {
    cache.clear();
    cache.owner_ = owner;
  }
  return cache;
}

namespace {
uint64_t load_tail(const char* p, size_t n) {  // n < 8 bytes, zero-extended
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return v;
}
uint64_t load8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
// a == b for n <= kMaxWordBytes bytes, inline (the library call costs more than short words do).
bool same_bytes(const char* a, const char* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    if (load8(a + i) != load8(b + i)) return false;
  return load_tail(a + i, n - i) == load_tail(b + i, n - i);
}
}  // namespace

// Eight bytes at a time, each folded in with a multiply and a shift (splitmix64's constants).
uint64_t WordCache::hash_of(std::string_view word) {
  const char* p = word.data();
  const size_t n = word.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    h = (h ^ load8(p + i)) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  h = (h ^ load_tail(p + i, n - i)) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h | 1;
}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  size_ = 0;
  arena_.clear();
}

bool WordCache::find(std::string_view word, std::vector<int32_t>& out) const {
  if (slots_.empty() || word.size() > kMaxWordBytes) return false;
  const uint64_t hash = hash_of(word);
  for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return false;
    const char* entry = arena_.data() + s.entry;
    if (s.hash == hash && s.word_size == word.size() && same_bytes(entry, word.data(), word.size())) {
      const size_t at = out.size();
      out.resize(at + s.id_count);
      std::memcpy(out.data() + at, entry + s.word_size, s.id_count * sizeof(int32_t));
      return true;
    }
  }
}

void WordCache::insert(std::string_view word, std::span<const int32_t> ids) {
  if (word.size() > kMaxWordBytes) return;
  if (slots_.empty()) slots_.resize(kSlots);
  if (size_ >= kSlots / 2) clear();
  const uint64_t hash = hash_of(word);
  size_t i = hash & (kSlots - 1);
  while (slots_[i].hash != 0) i = (i + 1) & (kSlots - 1);
  slots_[i] = {hash, static_cast<uint32_t>(arena_.size()), static_cast<uint16_t>(word.size()),
               static_cast<uint16_t>(ids.size())};
  ++size_;
  arena_.append(word);
  arena_.append(reinterpret_cast<const char*>(ids.data()), ids.size_bytes());
}

}  // namespace megatrain
