// Train / valid / test split of a dataset's documents (Megatron's `--split "98,1,1"`).
//
// Contract (Megatron-Core utils.get_split_indices): the split string is 1 to 3 comma-separated
// non-negative numbers with a positive sum, padded with zeros to 3 and normalised to fractions f_i.
// With N documents, boundaries b_0 = 0, b_{i+1} = b_i + round(f_i · N) (round half to even, as
// Python's round), then every b_i with i ≥ 1 is shifted by (N − b_3) so the last range ends at N.
// Range i is documents [b_i, b_{i+1}).
// Invariant: the three ranges are disjoint, contiguous, in order and cover [0, N).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace megatrain {

// Documents [begin, end) of one dataset.
struct DocRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const DocRange&, const DocRange&) = default;
};

enum class SplitPart : int { train = 0, valid = 1, test = 2 };

// The normalised fractions of "98,1,1"; nullopt when the text is not 1–3 comma-separated finite
// non-negative numbers with a positive sum.
std::optional<std::array<double, 3>> parse_doc_split(std::string_view text);

// The three document ranges of a dataset of `num_documents` documents (contract above).
std::array<DocRange, 3> split_documents(const std::array<double, 3>& fractions, int64_t num_documents);

}  // namespace megatrain
