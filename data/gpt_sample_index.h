// The sample index of a GPT dataset: Megatron's doc_idx / sample_idx / shuffle_idx, built per
// epoch from the documents of one range of an IndexedDataset.
//
// Contract (exact; resume and the cache depend on it). D = the documents of the range, n = |D|,
// T = their total tokens, S = seq_len, per_epoch = ⌊(T − 1) / S⌋.
//   * Epoch e's document order: D in dataset order when shuffle = false; with shuffle = true a
//     Fisher–Yates permutation of it (i from n−1 down to 1: w = rng_words(RngKey{seed,
//     RngPurpose::data, stream = 2e, offset = 0}, i), r = w[0] | w[1] << 32, j = r mod (i+1),
//     swap(order[i], order[j]), starting from D in dataset order).
//   * Epoch e's stream is the tokens of its documents concatenated in that order (each document
//     ends with its EOD token, so samples cross document boundaries). Its sample p (0 ≤ p <
//     per_epoch) is stream tokens [p·S, p·S + S]: S+1 tokens. The last (T−1) mod S tokens of an
//     epoch's stream are not used that epoch.
//   * Sample number g = e·per_epoch + p. The dataset's sample i (i ≥ 0) is sample number
//     shuffle_idx[i] = e·per_epoch + σ_e(i mod per_epoch) with e = ⌊i / per_epoch⌋, where σ_e is
//     the identity when shuffle = false and otherwise the same Fisher–Yates over [0, per_epoch)
//     with stream = 2e + 1.
// With shuffle = false and the whole dataset as range this is exactly the ordered contract: sample
// i = tokens [(i mod per_epoch)·S, … + S] of the dataset's stream.
//
// Unpacked (pack = false; data.pack): per_epoch = n and sample p of epoch e is the document at
// position p of epoch e's order (sample_idx (p, 0)); shuffle_idx as above. The sample holds its
// first min(length, S+1) tokens; the rest are padding — the document's last token repeated (0 for
// an empty document), never learned (GptDataset). A range needs one document, not S+1 tokens.
//
// Invariant: the index holds whole epochs, and epoch e depends only on (documents, S, shuffle,
// seed, e) — never on how many samples were asked for — so an index built for more samples
// extends one built for fewer, and sample i is the same in both.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/doc_split.h"
#include "data/indexed_dataset.h"

namespace megatrain {

// What determines a GPT sample index.
struct GptSampleSpec {
  DocRange docs;    // documents of the dataset used (a split range, or all)
  int seq_len = 0;  // S
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t num_samples = 0;  // samples the run reads; the index covers ⌈num_samples / per_epoch⌉ epochs
  bool pack = true;         // false: one document a sample (see "Unpacked" above)
};

struct GptSampleIndex {
  int64_t docs_per_epoch = 0;     // n
  int64_t samples_per_epoch = 0;  // per_epoch
  int64_t epochs = 0;
  std::vector<int32_t> doc_idx;      // (epochs · n): document ids; epoch e's order at [e·n, (e+1)·n)
  std::vector<int32_t> sample_idx;   // (epochs · per_epoch, 2): where sample number g starts —
                                     // (document position within its epoch's order, token offset in it)
  std::vector<int64_t> shuffle_idx;  // (epochs · per_epoch): sample number read as sample i
};

// Throws DataError (naming the prefix, the document range and the fix) when the range has fewer
// than S + 1 tokens, more than 2^31 − 1 documents, or a document of 2^31 tokens or more.
GptSampleIndex build_gpt_sample_index(const IndexedDataset& dataset, const GptSampleSpec& spec);

// "" when `index` has the shape the contract gives for (dataset, spec) and every entry is in range
// (a loaded cache is checked with this before use); else what is wrong.
std::string gpt_sample_index_problem(const GptSampleIndex& index, const IndexedDataset& dataset,
                                     const GptSampleSpec& spec);

// Tokens of document d: [first, first + count) of the dataset's concatenated stream.
struct DocTokens {
  int64_t first, count;
};
DocTokens document_tokens(const IndexedDataset& dataset, int64_t d);

}  // namespace megatrain
