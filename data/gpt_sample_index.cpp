// Builds and checks GPT sample indices (contract in gpt_sample_index.h).
// Invariant: epoch e of the index is a pure function of (documents, S, shuffle, seed, e).
#include "data/gpt_sample_index.h"

#include <fmt/format.h>

#include <limits>
#include <numeric>
#include <span>
#include <utility>

#include "kernels/check.h"
#include "kernels/rng.h"

namespace megatrain {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The documented Fisher–Yates over `v` with RngKey{seed, data, stream}.
template <class T>
void permute(std::span<T> v, uint64_t seed, uint32_t stream) {
  const RngKey key{seed, static_cast<uint32_t>(RngPurpose::data), stream, 0};
  for (auto i = static_cast<int64_t>(v.size()) - 1; i >= 1; --i) {
    const auto w = rng_words(key, static_cast<uint64_t>(i));
    const uint64_t r = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(r % static_cast<uint64_t>(i + 1))]);
  }
}

std::string range_name(const IndexedDataset& ds, const DocRange& r) {
  return fmt::format("\"{}\" documents [{}, {})", ds.prefix(), r.begin, r.end);
}

// Token counts of the documents of the range; DataError when the range cannot give one sample.
std::vector<int64_t> range_lengths(const IndexedDataset& ds, const GptSampleSpec& spec, int64_t& total) {
  const DocRange& r = spec.docs;
  MT_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= ds.num_documents(), "document range [{}, {}) of {} documents",
           r.begin, r.end, ds.num_documents());
  MT_DATA_CHECK(r.size() <= kInt32Max,
                 "{}: more than {} documents in one dataset are not supported; split the data "
                 "into several datasets and blend them",
                 range_name(ds, r), kInt32Max);
  std::vector<int64_t> lengths(static_cast<size_t>(r.size()));
  total = 0;
  for (int64_t d = r.begin; d < r.end; ++d) {
    const int64_t len = document_tokens(ds, d).count;
    MT_DATA_CHECK(len <= kInt32Max, "\"{}\": document {} has {} tokens, more than {} are not supported", ds.prefix(),
                   d, len, kInt32Max);
    lengths[static_cast<size_t>(d - r.begin)] = len;
    total += len;
  }
  MT_DATA_CHECK(spec.seq_len >= 1, "train.seq_len = {} must be at least 1", spec.seq_len);
  MT_DATA_CHECK(r.size() >= 1, "{} hold no document; use more data or a data.split that gives this part "
                "documents", range_name(ds, r));
  MT_DATA_CHECK(!spec.pack || total >= int64_t{spec.seq_len} + 1,
                 "{} hold {} tokens, fewer than train.seq_len + 1 = {}; use more data, a smaller train.seq_len "
                 "or a data.split that gives this part more documents",
                 range_name(ds, r), total, int64_t{spec.seq_len} + 1);
  return lengths;
}

int64_t epochs_for(int64_t num_samples, int64_t per_epoch) { return (num_samples + per_epoch - 1) / per_epoch; }

int64_t samples_per_epoch(const GptSampleSpec& spec, int64_t total) {
  return spec.pack ? (total - 1) / spec.seq_len : spec.docs.size();
}

}  // namespace

DocTokens document_tokens(const IndexedDataset& ds, int64_t d) {
  const auto [first, last] = ds.document_sequences(d);
  const int64_t start = first < ds.num_sequences() ? ds.sequence_start(first) : ds.num_tokens();
  const int64_t end = last < ds.num_sequences() ? ds.sequence_start(last) : ds.num_tokens();
  MT_CHECK(start <= end, "document {} of \"{}\" has negative length", d, ds.prefix());
  return {start, end - start};
}

GptSampleIndex build_gpt_sample_index(const IndexedDataset& ds, const GptSampleSpec& spec) {
  MT_CHECK(spec.num_samples >= 0, "negative sample count {}", spec.num_samples);
  int64_t total = 0;
  const std::vector<int64_t> lengths = range_lengths(ds, spec, total);
  GptSampleIndex x;
  const int64_t n = spec.docs.size(), S = spec.seq_len;
  x.docs_per_epoch = n;
  x.samples_per_epoch = samples_per_epoch(spec, total);
  x.epochs = epochs_for(spec.num_samples, x.samples_per_epoch);
  MT_DATA_CHECK(x.epochs < (int64_t{1} << 31), "{}: {} samples need {} epochs, more than 2^31",
                 range_name(ds, spec.docs), spec.num_samples, x.epochs);
  const int64_t pe = x.samples_per_epoch;
  x.doc_idx.resize(static_cast<size_t>(x.epochs * n));
  x.sample_idx.resize(static_cast<size_t>(2 * x.epochs * pe));
  x.shuffle_idx.resize(static_cast<size_t>(x.epochs * pe));
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::vector<int64_t> sigma(static_cast<size_t>(pe));
  for (int64_t e = 0; e < x.epochs; ++e) {
    const auto stream = static_cast<uint32_t>(2 * e);
    std::iota(order.begin(), order.end(), static_cast<int32_t>(spec.docs.begin));
    if (spec.shuffle) permute(std::span<int32_t>(order), spec.seed, stream);
    std::copy(order.begin(), order.end(), x.doc_idx.begin() + e * n);
    if (!spec.pack) {  // sample p is the epoch's document p, from its start
      for (int64_t p = 0; p < pe; ++p) x.sample_idx[static_cast<size_t>(2 * (e * pe + p))] = static_cast<int32_t>(p);
    } else {
      int64_t k = 0, t = 0;  // document position in the epoch, stream token where it starts
      for (int64_t p = 0; p < pe; ++p) {
        const int64_t start = p * S;
        while (t + lengths[static_cast<size_t>(order[static_cast<size_t>(k)] - spec.docs.begin)] <= start)
          t += lengths[static_cast<size_t>(order[static_cast<size_t>(k++)] - spec.docs.begin)];
        x.sample_idx[static_cast<size_t>(2 * (e * pe + p))] = static_cast<int32_t>(k);
        x.sample_idx[static_cast<size_t>(2 * (e * pe + p) + 1)] = static_cast<int32_t>(start - t);
      }
    }
    std::iota(sigma.begin(), sigma.end(), int64_t{0});
    if (spec.shuffle) permute(std::span<int64_t>(sigma), spec.seed, stream + 1);
    for (int64_t p = 0; p < pe; ++p)
      x.shuffle_idx[static_cast<size_t>(e * pe + p)] = e * pe + sigma[static_cast<size_t>(p)];
  }
  return x;
}

std::string gpt_sample_index_problem(const GptSampleIndex& x, const IndexedDataset& ds, const GptSampleSpec& spec) {
  int64_t total = 0;
  range_lengths(ds, spec, total);
  const int64_t n = spec.docs.size(), pe = samples_per_epoch(spec, total), epochs = epochs_for(spec.num_samples, pe);
  if (x.docs_per_epoch != n || x.samples_per_epoch != pe || x.epochs != epochs)
    return fmt::format("shape (documents {}, samples per epoch {}, epochs {}) instead of ({}, {}, {})",
                       x.docs_per_epoch, x.samples_per_epoch, x.epochs, n, pe, epochs);
  if (x.doc_idx.size() != static_cast<size_t>(epochs * n) ||
      x.sample_idx.size() != static_cast<size_t>(2 * epochs * pe) ||
      x.shuffle_idx.size() != static_cast<size_t>(epochs * pe))
    return "array sizes do not match the shape";
  for (int32_t d : x.doc_idx)
    if (d < spec.docs.begin || d >= spec.docs.end) return fmt::format("document id {} outside the range", d);
  for (size_t g = 0; g < x.shuffle_idx.size(); ++g) {
    if (x.sample_idx[2 * g] < 0 || x.sample_idx[2 * g] >= n || x.sample_idx[2 * g + 1] < 0)
      return fmt::format("sample {} starts at a position outside its epoch", g);
    if (!spec.pack && (x.sample_idx[2 * g] != static_cast<int64_t>(g) % pe || x.sample_idx[2 * g + 1] != 0))
      return fmt::format("unpacked sample {} does not start its own document", g);
    const int64_t e = static_cast<int64_t>(g) / pe, s = x.shuffle_idx[g];
    if (s < e * pe || s >= (e + 1) * pe) return fmt::format("shuffle entry {} = {} outside its epoch", g, s);
  }
  return {};
}

}  // namespace megatrain
