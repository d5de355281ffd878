// The on-disk cache of a blended dataset's sample indices, so a restart on a large corpus loads
// them instead of rebuilding.
//
// File `DIR/sample-index-<16 hex digits>.bin`, the digits a 64-bit FNV-1a hash of the key text
// (everything the indices depend on; see dataset_builder.h). Layout, native little-endian:
//   char   magic[8] = "MTSMPIDX", uint64 version = 2,
//   uint64 key length, key bytes (must equal the expected key exactly),
//   uint64 number of datasets D, the blend index (uint64 n, uint16 dataset[n], uint64 n,
//   int64 sample[n]), then per dataset: int64 docs_per_epoch, samples_per_epoch, epochs, and
//   doc_idx, sample_idx, shuffle_idx each as (uint64 count, elements),
//   uint64 checksum of every byte before it.
// Files are written to a unique temporary name and renamed into place, so a reader sees either
// no file or a complete one.
// Invariant: read returns `loaded` only for a complete file whose checksum and key match; anything
// short, damaged or stale is `damaged` with the reason, never partially used.
#pragma once
#include <string>
#include <vector>

#include "data/blended_dataset.h"
#include "data/gpt_sample_index.h"

namespace megatrain {

struct SampleIndexSet {
  BlendIndex blend;                      // empty for a single dataset
  std::vector<GptSampleIndex> datasets;  // one per blended dataset
};

// DIR/sample-index-<hash of key>.bin
std::string sample_index_cache_path(const std::string& dir, const std::string& key);

enum class CacheRead { loaded, missing, damaged };
// Reads PATH into `out` when it is a valid cache file for `key`; `problem` says why not when damaged.
CacheRead read_sample_index_cache(const std::string& path, const std::string& key, SampleIndexSet& out,
                                  std::string& problem);

// Writes the set (creating the directory); returns "" on success, else why it could not.
std::string write_sample_index_cache(const std::string& path, const std::string& key, const SampleIndexSet& set);

}  // namespace megatrain
