// data.pack = false (data/gpt_sample_index.h "Unpacked", data/gpt_dataset.h): every sample is one
// document — its first S+1 tokens, then its last token repeated as padding, never learned — each
// epoch reads every document once in its (shuffled) document order, a document over S+1 tokens is
// cut and counted, a loss-mask companion's bits are kept, the loader turns padding into unlearned
// targets, and the cache key tells unpacked indices from packed ones. Expected values are computed
// here from the documents written.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/dataset_builder.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data/loss_mask.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

constexpr int kSeq = 6;  // S: samples of 7 tokens

class Unpacked : public ::testing::Test {
 protected:
  // Documents of 1 to 12 tokens (some over S+1), tokens distinct across documents; the mask (when
  // written) learns the odd tokens.
  void write(bool mask) {
    prefix_ = (dir_ / (mask ? "masked" : "plain")).string();
    IndexedDatasetWriter w(prefix_, TokenDtype::u16, mask);
    docs_.clear();
    for (int d = 0, next = 0; d < 17; ++d) {
      std::vector<int32_t> doc;
      std::vector<uint8_t> bits;
      for (int t = 0; t < 1 + (d * 5) % 12; ++t, ++next) doc.push_back(next), bits.push_back(next % 2);
      docs_.push_back(doc);
      if (mask)
        w.add_document(doc, bits);
      else
        w.add_document(doc);
    }
    w.finalize();
    ds_ = std::make_unique<IndexedDataset>(IndexedDataset::open(prefix_));
  }
  GptSampleSpec spec(bool shuffle, int64_t samples) const {
    return {DocRange{0, ds_->num_documents()}, kSeq, shuffle, 3, samples, /*pack=*/false};
  }
  // Document D as an unpacked sample: tokens, and learned bits (MASK: the odd tokens, else all).
  void expected(size_t d, bool mask, std::vector<int32_t>& tokens, std::vector<uint8_t>& learned) const {
    const auto& doc = docs_[d];
    const size_t take = std::min<size_t>(doc.size(), kSeq + 1);
    tokens.assign(doc.begin(), doc.begin() + static_cast<std::ptrdiff_t>(take));
    tokens.resize(kSeq + 1, doc[take - 1]);
    learned.assign(kSeq + 1, 0);
    for (size_t t = 0; t < take; ++t) learned[t] = mask ? static_cast<uint8_t>(doc[t] % 2) : 1;
  }

  test::TempDir dir_{"unpacked"};
  std::string prefix_;
  std::vector<std::vector<int32_t>> docs_;
  std::unique_ptr<IndexedDataset> ds_;
};

TEST_F(Unpacked, EachSampleIsOneDocumentPaddedOrCut) {
  for (bool mask : {false, true}) {
    write(mask);
    const GptDataset g(*ds_, spec(/*shuffle=*/false, 40));
    ASSERT_EQ(g.num_samples_per_epoch(), 17);
    EXPECT_TRUE(g.has_loss_mask());  // padding is never learned, with or without a companion
    int64_t over = 0;
    for (const auto& doc : docs_) over += doc.size() > kSeq + 1 ? 1 : 0;
    ASSERT_GT(over, 0);
    EXPECT_EQ(g.cut_documents(), over);
    for (int64_t i = 0; i < g.num_samples(); ++i) {
      std::vector<int32_t> tokens(kSeq + 1), want_tokens;
      std::vector<uint8_t> learned(kSeq + 1), want_learned;
      g.read_sample(i, tokens.data(), learned.data());
      expected(static_cast<size_t>(i % 17), mask, want_tokens, want_learned);
      EXPECT_EQ(tokens, want_tokens) << "sample " << i << " mask " << mask;
      EXPECT_EQ(learned, want_learned) << "sample " << i << " mask " << mask;
    }
    const size_t short_doc = 0;  // 1 token: the rest of its sample is padding
    ASSERT_EQ(docs_[short_doc].size(), 1u);
    EXPECT_CONTAINS(g.describe(0, 3), "padding after document 0");
    EXPECT_CONTAINS(g.describe(1, 2), ".bin token offset 3 (document 1)");
  }
}

TEST_F(Unpacked, EveryEpochReadsEveryDocumentOnceInItsShuffledOrder) {
  write(false);
  const GptDataset g(*ds_, spec(/*shuffle=*/true, 3 * 17));
  std::vector<std::vector<int32_t>> firsts(3);  // each sample's first token names its document
  for (int64_t i = 0; i < 3 * 17; ++i) {
    std::vector<int32_t> tokens(kSeq + 1);
    g.sample(i, tokens.data());
    const auto d = std::find_if(docs_.begin(), docs_.end(), [&](const auto& doc) { return doc[0] == tokens[0]; });
    ASSERT_NE(d, docs_.end());
    std::vector<int32_t> want;
    std::vector<uint8_t> unused;
    expected(static_cast<size_t>(d - docs_.begin()), false, want, unused);
    EXPECT_EQ(tokens, want) << "sample " << i;
    firsts[static_cast<size_t>(i / 17)].push_back(static_cast<int32_t>(d - docs_.begin()));
  }
  for (const auto& epoch : firsts) EXPECT_EQ(std::set<int32_t>(epoch.begin(), epoch.end()).size(), 17u);
  EXPECT_NE(firsts[0], firsts[1]);
  std::vector<int32_t> ordered(17);
  for (int d = 0; d < 17; ++d) ordered[static_cast<size_t>(d)] = d;
  EXPECT_NE(firsts[0], ordered);
}

TEST_F(Unpacked, TheLoaderLeavesPaddingOutOfTheLoss) {
  write(false);
  const GptDataset g(*ds_, spec(/*shuffle=*/false, 8));
  const BatchLoader loader(g, 2, 4, 0, 1);
  std::vector<int32_t> in(2 * kSeq), tg(2 * kSeq);
  loader.load(0, 1, in.data(), tg.data());  // samples 2 and 3: documents of 11 and 4 tokens
  for (int row = 0; row < 2; ++row) {
    const auto& doc = docs_[static_cast<size_t>(2 + row)];
    for (int t = 0; t < kSeq; ++t) {
      const bool real = static_cast<size_t>(t + 1) < doc.size();
      EXPECT_EQ(tg[static_cast<size_t>(row * kSeq + t)], real ? doc[static_cast<size_t>(t + 1)] : kUnlearnedTarget)
          << "row " << row << " t " << t;
    }
  }
}

TEST_F(Unpacked, TheCacheKeyAndTheChecksKnowTheMode) {
  write(false);
  const BlendPart part{1.0, ds_.get(), DocRange{0, ds_->num_documents()}};
  SampleIndexOptions o{kSeq, true, 3, 40, "", false, false};
  const std::string packed = sample_index_key({&part, 1}, o);
  o.pack = false;
  const std::string unpacked = sample_index_key({&part, 1}, o);
  EXPECT_EQ(packed.find("\nunpacked\n"), std::string::npos);  // packed keys are those of before
  EXPECT_NE(packed, unpacked);
  const GptSampleSpec s = spec(true, 40);
  GptSampleIndex index = build_gpt_sample_index(*ds_, s);
  EXPECT_EQ(gpt_sample_index_problem(index, *ds_, s), "");
  GptSampleSpec as_packed = s;
  as_packed.pack = true;
  EXPECT_NE(gpt_sample_index_problem(index, *ds_, as_packed), "");
  index.sample_idx[3] = 1;  // sample 1 starting one token into its document
  EXPECT_CONTAINS(gpt_sample_index_problem(index, *ds_, s), "does not start its own document");
  // One short document is enough unpacked; an empty range is not.
  GptSampleSpec one = s;
  one.docs = DocRange{0, 1};
  EXPECT_EQ(build_gpt_sample_index(*ds_, one).samples_per_epoch, 1);
  one.docs = DocRange{0, 0};
  EXPECT_CONTAINS(test::input_error_of([&] { build_gpt_sample_index(*ds_, one); }), "hold no document");
}

}  // namespace
}  // namespace megatrain
