#include "data/bpe_merges.h"

#include <functional>
#include <queue>

namespace megatrain {

namespace {
uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

void MergeTable::add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  rules_.insert_or_assign(pair_key(left, right), std::pair{rank, merged});
}

// [Note: BPE merge order] The symbols form a linked list; a heap holds candidate pairs ordered by
// (rank, position). An entry whose symbols have changed since it was pushed is stale and skipped.
void MergeTable::apply(const std::vector<int32_t>& ids, std::vector<int32_t>& out) const {
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
    auto it = rules_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it != rules_.end())
      heap.push({it->second.first, pos, symbols[pos].id, symbols[next].id, it->second.second});
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

}  // namespace megatrain
