// Builds the blended GPT dataset of one role (training or validation) from weighted document
// ranges of indexed datasets, loading its sample indices from the cache when a valid file exists
// and building (and, on the writing rank, saving) them otherwise.
//
// Cache location: options.cache_dir, or when "" the folder `PREFIX.megatrain-cache/` next to the
// first dataset's PREFIX.idx. The cache key (sample_index_key) is the text of everything the
// indices depend on: each dataset's absolute prefix, the sizes and modification times of its .idx
// and .bin, its document range (from data.split) and normalised weight, and seq_len, seed,
// shuffle and the number of samples. A damaged, short or mismatched file is rebuilt with a
// warning; a cache that cannot be written is a warning and the run goes on with the in-memory index.
//
// Invariant: the dataset returned is the same whether its indices were loaded or built.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/blended_dataset.h"
#include "data/doc_split.h"
#include "data/indexed_dataset.h"

namespace megatrain {

struct BlendPart {
  double weight = 1.0;                      // > 0; normalised over the parts
  const IndexedDataset* dataset = nullptr;  // must outlive the built dataset
  DocRange docs;                            // the documents used (a split range, or all)
};

struct SampleIndexOptions {
  int seq_len = 0;
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t num_samples = 0;   // global samples the run reads
  std::string cache_dir;     // "" = next to the first dataset
  bool use_cache = true;     // false: always build in memory, touch no file
  bool write_cache = false;  // this process writes a missing or damaged cache file (one rank only)
  bool pack = true;          // data.pack (GptSampleSpec::pack)
};

struct BuildReport {
  bool loaded = false;                // the indices came from the cache file
  bool saved = false;                 // this process wrote the cache file
  std::string path;                   // the cache file ("" when the cache is off)
  std::vector<std::string> warnings;  // damaged file rebuilt, cache not writable
  double seconds = 0.0;               // time to load or build (and save)
};

std::string sample_index_key(std::span<const BlendPart> parts, const SampleIndexOptions& options);

// DataError when a range has fewer than seq_len + 1 tokens or a weight is not positive.
std::unique_ptr<BlendedDataset> build_blended_dataset(std::span<const BlendPart> parts,
                                                      const SampleIndexOptions& options, BuildReport& report);

}  // namespace megatrain
