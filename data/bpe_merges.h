// The merge table of byte-level BPE. Invariant: apply only joins adjacent symbols, so the bytes
// its output stands for are the bytes of its input.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace megatrain {

// BPE merge rules: (left id, right id) -> (rank, merged id).
class MergeTable {
 public:
  // A later rule for the same pair replaces the earlier one (as HF's merge map does).
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // Merges `symbols` (one id per byte) and appends the resulting ids to `out`.
  // [Note: BPE merge order] Repeatedly merge the adjacent pair of lowest rank, the leftmost one
  // on ties, until no adjacent pair has a rule (HF's BPE::merge_word; same result as GPT-2's).
  void apply(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const;

 private:
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> rules_;
};

}  // namespace megatrain
