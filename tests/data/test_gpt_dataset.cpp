// Tests of the GPT sample contract (ordered windows; seeded per-epoch document and sample
// permutations; split ranges) and of the batch loader's global-batch / data-parallel slicing and
// resume, against values computed independently here.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "data/dataset_builder.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "kernels/check.h"
#include "kernels/rng.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

// A dataset of documents of varying lengths, each ending in EOD 256, and its stream computed here.
class GptData : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = (dir_ / "ds").string();
    IndexedDatasetWriter w(prefix_, TokenDtype::u16);
    for (int d = 0; d < 23; ++d) {
      std::vector<int32_t> doc;
      for (int t = 0; t < 3 + (d * 7) % 11; ++t) doc.push_back((d * 31 + t * 17) % 250);
      doc.push_back(256);
      docs_.push_back(doc);
      stream_.insert(stream_.end(), doc.begin(), doc.end());
      w.add_document(doc);
    }
    w.finalize();
    ds_ = std::make_unique<IndexedDataset>(IndexedDataset::open(prefix_));
    ASSERT_EQ(ds_->num_tokens(), static_cast<int64_t>(stream_.size()));
  }
  // stream[p·S .. p·S + S]
  std::vector<int32_t> window(int64_t p, int s) const {
    return {stream_.begin() + p * s, stream_.begin() + p * s + s + 1};
  }

  test::TempDir dir_{"gpt"};
  std::string prefix_;
  std::vector<int32_t> stream_;
  std::vector<std::vector<int32_t>> docs_;
  std::unique_ptr<IndexedDataset> ds_;
};

GptSampleSpec spec_of(const IndexedDataset& ds, int s, bool shuffle, uint64_t seed, int64_t samples) {
  return {DocRange{0, ds.num_documents()}, s, shuffle, seed, samples};
}

TEST_F(GptData, OrderedSamplesAreWindowsOfTheStream) {
  for (int s : {1, 4, 7}) {
    const int64_t per_epoch = (static_cast<int64_t>(stream_.size()) - 1) / s;
    GptDataset g(*ds_, spec_of(*ds_, s, /*shuffle=*/false, 1234, 3 * per_epoch));
    ASSERT_EQ(g.num_samples_per_epoch(), per_epoch);
    ASSERT_EQ(g.num_samples(), 3 * per_epoch);
    std::vector<int32_t> out(s + 1);
    for (int64_t i = 0; i < 3 * per_epoch; ++i) {
      g.sample(i, out.data());
      ASSERT_EQ(out, window(i % per_epoch, s)) << "S=" << s << " sample " << i;
    }
  }
}

TEST_F(GptData, TooFewTokensNamesDatasetAndSeqLen) {
  const auto n = static_cast<int>(stream_.size());
  EXPECT_NO_THROW(GptDataset(*ds_, spec_of(*ds_, n - 1, false, 0, 1)));
  const std::string msg = test::input_error_of([&] { GptDataset(*ds_, spec_of(*ds_, n, false, 0, 1)); });
  EXPECT_CONTAINS(msg, prefix_);
  EXPECT_CONTAINS(msg, "train.seq_len + 1");
  EXPECT_THROW(GptDataset(*ds_, spec_of(*ds_, 0, false, 0, 1)), InputError);
}

// The documented Fisher–Yates over [0, n), written out independently.
std::vector<int64_t> reference_permutation(uint64_t seed, uint32_t stream, int64_t n) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  RngKey key{seed, static_cast<uint32_t>(RngPurpose::data), stream, 0};
  for (int64_t i = n - 1; i >= 1; --i) {
    auto w = rng_words(key, i);
    uint64_t r = w[0] | (static_cast<uint64_t>(w[1]) << 32);
    std::swap(perm[i], perm[r % (i + 1)]);
  }
  return perm;
}

// The shuffled contract computed here from the documents: epoch e's samples, in the order read.
std::vector<std::vector<int32_t>> reference_epoch(const std::vector<std::vector<int32_t>>& docs, DocRange range, int s,
                                                  uint64_t seed, uint32_t e) {
  const auto order = reference_permutation(seed, 2 * e, range.size());
  std::vector<int32_t> stream;
  for (int64_t k : order) stream.insert(stream.end(), docs[range.begin + k].begin(), docs[range.begin + k].end());
  const int64_t per_epoch = (static_cast<int64_t>(stream.size()) - 1) / s;
  const auto sigma = reference_permutation(seed, 2 * e + 1, per_epoch);
  std::vector<std::vector<int32_t>> out;
  for (int64_t p = 0; p < per_epoch; ++p)
    out.emplace_back(stream.begin() + sigma[p] * s, stream.begin() + sigma[p] * s + s + 1);
  return out;
}

std::vector<std::vector<int32_t>> epoch_samples(const GptDataset& g, int64_t e) {
  const int64_t n = g.num_samples_per_epoch();
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = e * n; i < (e + 1) * n; ++i) {
    out.emplace_back(g.seq_len() + 1);
    g.sample(i, out.back().data());
  }
  return out;
}

TEST_F(GptData, ShuffledEpochsFollowTheDocumentAndSampleShuffleContract) {
  const int s = 3;
  for (DocRange range : {DocRange{0, 23}, DocRange{4, 17}}) {
    const GptSampleSpec spec{range, s, /*shuffle=*/true, 42, 1};
    GptDataset probe(*ds_, spec);
    const int64_t n = probe.num_samples_per_epoch();
    GptSampleSpec three = spec;
    three.num_samples = 3 * n;
    GptDataset a(*ds_, three), b(*ds_, three);
    three.seed = 43;
    GptDataset c(*ds_, three);
    ASSERT_EQ(a.index().epochs, 3);
    for (int64_t e = 0; e < 3; ++e) {
      const auto got = epoch_samples(a, e);
      EXPECT_EQ(got, reference_epoch(docs_, range, s, 42, static_cast<uint32_t>(e))) << "epoch " << e;
      EXPECT_EQ(got, epoch_samples(b, e)) << "same seed, different samples";
      EXPECT_NE(got, epoch_samples(c, e)) << "different seed, same samples";
    }
    EXPECT_EQ(epoch_samples(probe, 0), epoch_samples(a, 0)) << "epoch 0 depends on the number of samples";
  }
}

TEST_F(GptData, DocumentShuffleIsAPureFunctionOfSeedAndEpoch) {
  const GptSampleSpec one{DocRange{0, 23}, 5, true, 7, 1};
  const int64_t per_epoch = GptDataset(*ds_, one).num_samples_per_epoch();
  GptSampleSpec four = one;
  four.num_samples = 4 * per_epoch;
  const GptSampleIndex a = build_gpt_sample_index(*ds_, four), b = build_gpt_sample_index(*ds_, one);
  four.seed = 8;
  const GptSampleIndex c = build_gpt_sample_index(*ds_, four);
  ASSERT_EQ(a.epochs, 4);
  ASSERT_EQ(b.epochs, 1);
  auto epoch = [](const GptSampleIndex& x, int64_t e) {
    return std::vector<int32_t>(x.doc_idx.begin() + e * 23, x.doc_idx.begin() + (e + 1) * 23);
  };
  EXPECT_EQ(epoch(a, 0), epoch(b, 0));
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<int32_t> expect;
    for (int64_t k : reference_permutation(7, static_cast<uint32_t>(2 * e), 23))
      expect.push_back(static_cast<int32_t>(k));
    EXPECT_EQ(epoch(a, e), expect) << "epoch " << e;
    EXPECT_NE(epoch(a, e), epoch(c, e)) << "seeds 7 and 8 give the same order in epoch " << e;
    if (e > 0) {
      EXPECT_NE(epoch(a, e), epoch(a, e - 1));
    }
  }
  EXPECT_TRUE(gpt_sample_index_problem(a, *ds_, GptSampleSpec{DocRange{0, 23}, 5, true, 7, 4 * per_epoch}).empty());
  GptSampleIndex bad = a;
  bad.doc_idx[3] = 99;
  EXPECT_NE(gpt_sample_index_problem(bad, *ds_, GptSampleSpec{DocRange{0, 23}, 5, true, 7, 4 * per_epoch}), "");
}

TEST_F(GptData, SplitRangeSamplesComeFromItsDocumentsOnly) {
  const DocRange range{6, 15};
  std::vector<int32_t> stream;
  for (int64_t d = range.begin; d < range.end; ++d) stream.insert(stream.end(), docs_[d].begin(), docs_[d].end());
  const int s = 4;
  const int64_t per_epoch = (static_cast<int64_t>(stream.size()) - 1) / s;
  GptDataset g(*ds_, GptSampleSpec{range, s, false, 1, 2 * per_epoch});
  ASSERT_EQ(g.num_samples_per_epoch(), per_epoch);
  EXPECT_EQ(g.num_tokens(), static_cast<int64_t>(stream.size()));
  std::vector<int32_t> out(s + 1);
  for (int64_t i = 0; i < 2 * per_epoch; ++i) {
    g.sample(i, out.data());
    const int64_t p = i % per_epoch;
    ASSERT_EQ(out, std::vector<int32_t>(stream.begin() + p * s, stream.begin() + p * s + s + 1)) << "sample " << i;
  }
}

// Row b of micro-batch m at step k on rank r must be sample k·G + r·(G/dp) + m·B + b.
void check_loader(const GptDataset& g, const std::vector<int32_t>& stream, int B, int G, int dp) {
  ASSERT_GE(g.num_samples(), 4 * G);
  const int s = g.seq_len();
  const int64_t per_epoch = g.num_samples_per_epoch();
  std::vector<int64_t> seen;
  for (int64_t k = 0; k < 4; ++k) {
    for (int r = 0; r < dp; ++r) {
      BatchLoader loader(g, B, G, r, dp);
      ASSERT_EQ(loader.max_micro_batches(), G / (B * dp));
      std::vector<int32_t> in(B * s), tg(B * s);
      for (int m = 0; m < loader.max_micro_batches(); ++m) {
        loader.load(k, m, in.data(), tg.data());
        for (int row = 0; row < B; ++row) {
          const int64_t idx = k * G + static_cast<int64_t>(r) * (G / dp) + m * B + row;
          const int64_t p = idx % per_epoch;  // shuffle = false
          seen.push_back(idx);
          for (int t = 0; t < s; ++t) {
            ASSERT_EQ(in[row * s + t], stream[p * s + t]) << "k" << k << " r" << r << " m" << m;
            ASSERT_EQ(tg[row * s + t], stream[p * s + t + 1]) << "k" << k << " r" << r << " m" << m;
          }
        }
      }
    }
  }
  // Together the ranks read every sample of every global batch exactly once.
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(4 * G);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
}

TEST_F(GptData, LoaderFollowsGlobalBatchContract) {
  GptDataset g(*ds_, spec_of(*ds_, 9, /*shuffle=*/false, 7, 4 * 8));
  ASSERT_LT(g.num_samples_per_epoch(), 4 * 8);  // the steps below cross an epoch boundary
  check_loader(g, stream_, /*B=*/2, /*G=*/8, /*dp=*/1);
  check_loader(g, stream_, /*B=*/2, /*G=*/8, /*dp=*/2);
  check_loader(g, stream_, /*B=*/1, /*G=*/6, /*dp=*/2);
}

// describe(i, t) names where token t of sample i lives: the token at that .bin offset is the one
// the sample holds, shuffled epochs included.
TEST_F(GptData, DescribeNamesTheFileOffsetOfEachTokenOfASample) {
  GptDataset g(*ds_, spec_of(*ds_, 5, /*shuffle=*/true, 99, 60));
  std::vector<int32_t> out(6);
  const std::regex re(".*/ds\\.bin token offset (\\d+) \\(document (\\d+)\\)");
  for (int64_t i = 0; i < g.num_samples(); ++i) {
    g.sample(i, out.data());
    for (int t = 0; t <= 5; ++t) {
      std::smatch m;
      const std::string d = g.describe(i, t);
      ASSERT_TRUE(std::regex_match(d, m, re)) << d;
      int32_t token = -1;
      ds_->read_tokens(std::stoll(m[1]), 1, &token);
      ASSERT_EQ(token, out[static_cast<size_t>(t)]) << "sample " << i << " token " << t << ": " << d;
    }
  }
}

// docs/robustness.md R20: a token at or beyond the vocabulary is refused as it is loaded, naming the
// file and the offset (the documents end with 256 here).
TEST_F(GptData, LoaderRefusesTokensBeyondTheVocabulary) {
  GptDataset g(*ds_, spec_of(*ds_, 4, /*shuffle=*/false, 1, 8));
  std::vector<int32_t> in(8), tg(8);
  EXPECT_NO_THROW(BatchLoader(g, 2, 2, 0, 1, 257).load(0, 0, in.data(), tg.data()));
  try {
    BatchLoader(g, 2, 2, 0, 1, 256).load(0, 0, in.data(), tg.data());
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "DATA_INVALID sample=0 " + prefix_ + ".bin token offset 3 (document 0): token 256 "
                                     "is outside [0, model.vocab_size = 256); the dataset was made with another "
                                     "tokenizer, or its .bin is damaged");
  }
}

TEST_F(GptData, LoaderRejectsIndivisibleGlobalBatch) {
  GptDataset g(*ds_, spec_of(*ds_, 5, false, 7, 8));
  EXPECT_THROW(BatchLoader(g, 2, 6, 0, 2), InputError);
  EXPECT_THROW(BatchLoader(g, 0, 8, 0, 1), InputError);
  EXPECT_NO_THROW(BatchLoader(g, 2, 8, 1, 2));
}

// On a batch ramp (data/batch_sizes.h) batch k is samples [F_k, F_k + G_k): the dp ranks read
// contiguous slices of G_k / dp, micro-batch after micro-batch, each sample exactly once — and a
// ramp size that micro_batch_size × dp does not divide is refused.
TEST_F(GptData, LoaderReadsEachRampedBatchOnce) {
  GptDataset g(*ds_, spec_of(*ds_, 5, false, 7, 200));
  const BatchSizes sizes(16, {4, 4, 40});
  const int B = 2, dp = 2;
  std::vector<int64_t> seen;
  for (int64_t k = 0; k < 10; ++k) {
    for (int r = 0; r < dp; ++r) {
      const BatchLoader loader(g, B, sizes, r, dp);
      ASSERT_EQ(loader.micro_batches(k), sizes.size(k) / (B * dp)) << "batch " << k;
      ASSERT_EQ(loader.max_micro_batches(), 16 / (B * dp));
      for (int m = 0; m < loader.micro_batches(k); ++m)
        for (int row = 0; row < B; ++row) {
          const int64_t i = loader.sample_index(k, m, row);
          EXPECT_EQ(i, sizes.first_sample(k) + r * (sizes.size(k) / dp) + m * B + row);
          seen.push_back(i);
        }
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(static_cast<size_t>(sizes.first_sample(10)));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
  EXPECT_THROW(BatchLoader(g, 4, sizes, 0, 2), InputError);  // 4 is not a multiple of 4 × 2
}

// The inputs and targets this rank reads at steps [first, last), concatenated.
std::vector<int32_t> read_steps(const BatchLoader& loader, int64_t first, int64_t last) {
  const size_t n = static_cast<size_t>(loader.micro_batch_size()) * loader.seq_len();
  std::vector<int32_t> all, in(n), tg(n);
  for (int64_t k = first; k < last; ++k)
    for (int m = 0; m < loader.micro_batches(k); ++m) {
      loader.load(k, m, in.data(), tg.data());
      all.insert(all.end(), in.begin(), in.end());
      all.insert(all.end(), tg.begin(), tg.end());
    }
  return all;
}

// What read_steps must give by data/loader.h's contract, taken from the source sample by sample:
// row b of micro-batch m at step k on rank r is sample k·G + r·(G/dp) + m·B + b.
std::vector<int32_t> contract_steps(const SampleSource& src, int B, int G, int r, int dp, int64_t first,
                                    int64_t last) {
  const int s = src.seq_len();
  std::vector<int32_t> all, sample(static_cast<size_t>(s) + 1);
  for (int64_t k = first; k < last; ++k)
    for (int m = 0; m < G / (B * dp); ++m) {
      std::vector<int32_t> in, tg;
      for (int b = 0; b < B; ++b) {
        src.sample(k * G + static_cast<int64_t>(r) * (G / dp) + m * B + b, sample.data());
        in.insert(in.end(), sample.begin(), sample.end() - 1);
        tg.insert(tg.end(), sample.begin() + 1, sample.end());
      }
      all.insert(all.end(), in.begin(), in.end());
      all.insert(all.end(), tg.begin(), tg.end());
    }
  return all;
}

// A loader constructed fresh at step k (as a resumed run does: new datasets, new index) reads the
// batches the uninterrupted run's blend holds for steps k …, by the loader contract; an index built
// for fewer steps agrees on the steps it covers.
TEST_F(GptData, ResumedLoaderReadsTheSameBatchesAsAnUninterruptedOne) {
  const std::string prefix2 = (dir_ / "ds2").string();
  {
    IndexedDatasetWriter w(prefix2, TokenDtype::u16);
    for (int d = 0; d < 17; ++d) {
      std::vector<int32_t> doc(2 + (d * 5) % 9, 100 + d);
      doc.push_back(256);
      w.add_document(doc);
    }
    w.finalize();
  }
  const IndexedDataset second = IndexedDataset::open(prefix2);
  const int B = 2, G = 8, S = 4;
  const int64_t steps = 8, k = 5;
  auto make = [&](int64_t samples) {
    const BlendPart parts[] = {{0.7, ds_.get(), DocRange{0, 23}}, {0.3, &second, DocRange{0, 17}}};
    SampleIndexOptions o{S, /*shuffle=*/true, 11, samples, "", /*use_cache=*/false, false};
    BuildReport report;
    return build_blended_dataset(parts, o, report);
  };
  for (int dp : {1, 2})
    for (int r = 0; r < dp; ++r) {
      const auto full = make(steps * G);
      const std::vector<int32_t> head = contract_steps(*full, B, G, r, dp, 0, k),
                                 tail = contract_steps(*full, B, G, r, dp, k, steps);
      std::vector<int32_t> joined = head;
      joined.insert(joined.end(), tail.begin(), tail.end());
      EXPECT_EQ(read_steps(BatchLoader(*full, B, G, r, dp), 0, steps), joined) << "dp " << dp << " rank " << r;
      const auto fresh = make(steps * G);
      EXPECT_EQ(read_steps(BatchLoader(*fresh, B, G, r, dp), k, steps), tail) << "dp " << dp << " rank " << r;
      const auto shorter = make(k * G);
      EXPECT_EQ(read_steps(BatchLoader(*shorter, B, G, r, dp), 0, k), head) << "dp " << dp << " rank " << r;
    }
}

}  // namespace
}  // namespace megatrain
