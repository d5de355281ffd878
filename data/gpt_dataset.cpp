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
    : dataset_(dataset),
      spec_(spec),
      index_(std::move(index)),
      read_(spec.pack ? &GptDataset::read_packed : &GptDataset::read_unpacked),
      describe_(spec.pack ? &GptDataset::describe_packed : &GptDataset::describe_unpacked) {
  for (int64_t d = spec.docs.begin; d < spec.docs.end; ++d) {
    const int64_t count = document_tokens(dataset, d).count;
    num_tokens_ += count;
    cut_documents_ += !spec.pack && count > int64_t{spec.seq_len} + 1 ? 1 : 0;
  }
}

int64_t GptDataset::source_sample(int64_t i) const {
  MT_CHECK(i >= 0 && i < num_samples(), "sample {} outside the {} indexed samples of \"{}\"", i, num_samples(),
           dataset_.prefix());
  return index_.shuffle_idx[static_cast<size_t>(i)];
}

const int32_t* GptDataset::epoch_order(int64_t i, int64_t& pos, int64_t& offset) const {
  const int64_t g = source_sample(i);
  pos = index_.sample_idx[static_cast<size_t>(2 * g)];
  offset = index_.sample_idx[static_cast<size_t>(2 * g + 1)];
  return index_.doc_idx.data() + (g / index_.samples_per_epoch) * index_.docs_per_epoch;
}

std::string GptDataset::describe_packed(int64_t i, int t) const {
  int64_t pos = 0, offset = 0;
  const int32_t* doc_order = epoch_order(i, pos, offset);
  for (int64_t left = t; pos < index_.docs_per_epoch; ++pos, offset = 0) {
    const DocTokens doc = document_tokens(dataset_, doc_order[pos]);
    if (offset + left < doc.count)
      return fmt::format("{}.bin token offset {} (document {})", dataset_.prefix(), doc.first + offset + left,
                         doc_order[pos]);
    left -= doc.count - offset;
  }
  return "";
}

std::string GptDataset::describe_unpacked(int64_t i, int t) const {
  int64_t pos = 0, offset = 0;
  const int32_t d = epoch_order(i, pos, offset)[pos];
  const DocTokens doc = document_tokens(dataset_, d);
  if (t < doc.count) return fmt::format("{}.bin token offset {} (document {})", dataset_.prefix(), doc.first + t, d);
  return fmt::format("padding after document {} of {}", d, dataset_.prefix());
}

void GptDataset::read_packed(int64_t i, int32_t* out, uint8_t* learned) const {
  int64_t pos = 0, offset = 0;
  const int32_t* doc_order = epoch_order(i, pos, offset);
  int64_t remaining = int64_t{spec_.seq_len} + 1;
  while (remaining > 0) {
    MT_CHECK(pos < index_.docs_per_epoch, "sample {} of \"{}\" runs past its epoch", i, dataset_.prefix());
    const DocTokens doc = document_tokens(dataset_, doc_order[pos]);
    MT_CHECK(offset <= doc.count, "sample {} of \"{}\" starts past its document", i, dataset_.prefix());
    const int64_t take = std::min(remaining, doc.count - offset);
    dataset_.read_tokens(doc.first + offset, take, out);
    if (learned != nullptr) dataset_.read_loss_mask(doc.first + offset, take, learned), learned += take;
    out += take, remaining -= take, ++pos, offset = 0;
  }
}

void GptDataset::read_unpacked(int64_t i, int32_t* out, uint8_t* learned) const {
  int64_t pos = 0, offset = 0;
  const DocTokens doc = document_tokens(dataset_, epoch_order(i, pos, offset)[pos]);
  const int64_t size = int64_t{spec_.seq_len} + 1, take = std::min(size, doc.count);
  dataset_.read_tokens(doc.first, take, out);
  std::fill(out + take, out + size, take > 0 ? out[take - 1] : 0);
  if (learned == nullptr) return;
  dataset_.read_loss_mask(doc.first, take, learned);  // all learned without a companion
  std::fill(learned + take, learned + size, uint8_t{0});
}

}  // namespace megatrain
