// GPT samples read through a sample index (contract in gpt_dataset.h and gpt_sample_index.h).
// Invariant: read_sample() only reads; every index entry it follows is bounds-checked.
#include "data/gpt_dataset.h"

#include <algorithm>
#include <utility>

#include "kernels/check.h"

namespace megatrain {

GptDataset::GptDataset(const IndexedDataset& dataset, const GptSampleSpec& spec)
    : GptDataset(dataset, spec, build_gpt_sample_index(dataset, spec)) {}

GptDataset::GptDataset(const IndexedDataset& dataset, const GptSampleSpec& spec, GptSampleIndex index)
    : dataset_(dataset), spec_(spec), index_(std::move(index)) {
  for (int64_t d = spec.docs.begin; d < spec.docs.end; ++d) num_tokens_ += document_tokens(dataset, d).count;
}

int64_t GptDataset::source_sample(int64_t i) const {
  MT_CHECK(i >= 0 && i < num_samples(), "sample {} outside the {} indexed samples of \"{}\"", i, num_samples(),
           dataset_.prefix());
  return index_.shuffle_idx[static_cast<size_t>(i)];
}

std::string GptDataset::describe(int64_t i, int t) const {
  const int64_t g = source_sample(i), n = index_.docs_per_epoch;
  const int32_t* doc_order = index_.doc_idx.data() + (g / index_.samples_per_epoch) * n;
  int64_t pos = index_.sample_idx[static_cast<size_t>(2 * g)], offset = index_.sample_idx[static_cast<size_t>(2 * g + 1)];
  for (int64_t left = t; pos < n; ++pos, offset = 0) {
    const DocTokens doc = document_tokens(dataset_, doc_order[pos]);
    if (offset + left < doc.count)
      return fmt::format("{}.bin token offset {} (document {})", dataset_.prefix(), doc.first + offset + left,
                         doc_order[pos]);
    left -= doc.count - offset;
  }
  return "";
}

void GptDataset::read_sample(int64_t i, int32_t* out, uint8_t* learned) const {
  const int64_t g = source_sample(i), n = index_.docs_per_epoch;
  const int32_t* doc_order = index_.doc_idx.data() + (g / index_.samples_per_epoch) * n;
  int64_t pos = index_.sample_idx[static_cast<size_t>(2 * g)],
          offset = index_.sample_idx[static_cast<size_t>(2 * g + 1)];
  int64_t remaining = int64_t{spec_.seq_len} + 1;
  while (remaining > 0) {
    MT_CHECK(pos < n, "sample {} of \"{}\" runs past its epoch", i, dataset_.prefix());
    const DocTokens doc = document_tokens(dataset_, doc_order[pos]);
    MT_CHECK(offset <= doc.count, "sample {} of \"{}\" starts past its document", i, dataset_.prefix());
    const int64_t take = std::min(remaining, doc.count - offset);
    dataset_.read_tokens(doc.first + offset, take, out);
    if (learned != nullptr) dataset_.read_loss_mask(doc.first + offset, take, learned), learned += take;
    out += take, remaining -= take, ++pos, offset = 0;
  }
}

}  // namespace megatrain
