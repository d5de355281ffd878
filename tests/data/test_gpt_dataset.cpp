// Tests of the GPT sample contract (ordered windows, seeded per-epoch permutations) and of the
// batch loader's global-batch / data-parallel slicing, against values computed independently here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "kernels/check.h"
#include "kernels/rng.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

// A dataset of documents of varying lengths, each ending in EOD 256, and its stream computed here.
class GptData : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("megatrain_test_gpt_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
    prefix_ = (dir_ / "ds").string();
    IndexedDatasetWriter w(prefix_, TokenDtype::u16);
    for (int d = 0; d < 23; ++d) {
      std::vector<int32_t> doc;
      for (int t = 0; t < 3 + (d * 7) % 11; ++t) doc.push_back((d * 31 + t * 17) % 250);
      doc.push_back(256);
      stream_.insert(stream_.end(), doc.begin(), doc.end());
      w.add_document(doc);
    }
    w.finalize();
    ds_ = std::make_unique<IndexedDataset>(IndexedDataset::open(prefix_));
    ASSERT_EQ(ds_->num_tokens(), static_cast<int64_t>(stream_.size()));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // stream[p·S .. p·S + S]
  std::vector<int32_t> window(int64_t p, int s) const {
    return {stream_.begin() + p * s, stream_.begin() + p * s + s + 1};
  }

  fs::path dir_;
  std::string prefix_;
  std::vector<int32_t> stream_;
  std::unique_ptr<IndexedDataset> ds_;
};

TEST_F(GptData, OrderedSamplesAreWindowsOfTheStream) {
  for (int s : {1, 4, 7}) {
    GptDataset g(*ds_, s, /*shuffle=*/false, 1234);
    const int64_t per_epoch = (static_cast<int64_t>(stream_.size()) - 1) / s;
    ASSERT_EQ(g.num_samples_per_epoch(), per_epoch);
    std::vector<int32_t> out(s + 1);
    for (int64_t i = 0; i < 3 * per_epoch; ++i) {
      g.sample(i, out.data());
      ASSERT_EQ(out, window(i % per_epoch, s)) << "S=" << s << " sample " << i;
    }
  }
}

TEST_F(GptData, TooFewTokensNamesDatasetAndSeqLen) {
  const auto n = static_cast<int>(stream_.size());
  EXPECT_NO_THROW(GptDataset(*ds_, n - 1, false, 0));
  try {
    GptDataset g(*ds_, n, false, 0);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(prefix_), std::string::npos) << msg;
    EXPECT_NE(msg.find("train.seq_len + 1"), std::string::npos) << msg;
  }
  EXPECT_THROW(GptDataset(*ds_, 0, false, 0), InputError);
}

// All positions of one epoch, as the dataset reports them, checked against the sample contents.
std::vector<int64_t> epoch_order(const GptDataset& g, int64_t epoch, const std::vector<int32_t>& stream) {
  const int s = g.seq_len();
  const int64_t n = g.num_samples_per_epoch();
  std::vector<int64_t> order;
  std::vector<int32_t> out(s + 1);
  for (int64_t i = epoch * n; i < (epoch + 1) * n; ++i) {
    const int64_t p = g.source_position(i);
    g.sample(i, out.data());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), stream.begin() + p * s)) << "sample " << i;
    order.push_back(p);
  }
  return order;
}

// The documented Fisher–Yates, written out independently.
std::vector<int64_t> reference_permutation(uint64_t seed, uint32_t epoch, int64_t n) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  RngKey key{seed, static_cast<uint32_t>(RngPurpose::data), epoch, 0};
  for (int64_t i = n - 1; i >= 1; --i) {
    auto w = rng_words(key, i);
    uint64_t r = w[0] | (static_cast<uint64_t>(w[1]) << 32);
    std::swap(perm[i], perm[r % (i + 1)]);
  }
  return perm;
}

TEST_F(GptData, ShuffledEpochsArePermutations) {
  const int s = 3;
  GptDataset a(*ds_, s, /*shuffle=*/true, 42), b(*ds_, s, true, 42), c(*ds_, s, true, 43);
  const int64_t n = a.num_samples_per_epoch();
  ASSERT_GE(n, 30);
  std::vector<int64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t e = 0; e < 3; ++e) {
    auto order = epoch_order(a, e, stream_);
    EXPECT_EQ(order, reference_permutation(42, static_cast<uint32_t>(e), n)) << "epoch " << e;
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << e << " is not a permutation";
    EXPECT_NE(order, identity);
    EXPECT_EQ(order, epoch_order(b, e, stream_)) << "same seed, different order";
    EXPECT_NE(order, epoch_order(c, e, stream_)) << "different seed, same order";
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  // Going back to an earlier epoch gives the same order (the cached permutation is only a memo).
  EXPECT_EQ(epoch_order(a, 0, stream_), orders[0]);
}

// Row b of micro-batch m at step k on rank r must be sample k·G + r·(G/dp) + m·B + b.
void check_loader(const GptDataset& g, const std::vector<int32_t>& stream, int B, int G, int dp) {
  const int s = g.seq_len();
  const int64_t per_epoch = g.num_samples_per_epoch();
  std::vector<int64_t> seen;
  for (int64_t k = 0; k < 4; ++k) {
    for (int r = 0; r < dp; ++r) {
      BatchLoader loader(g, B, G, r, dp);
      ASSERT_EQ(loader.micro_batches_per_step(), G / (B * dp));
      std::vector<int32_t> in(B * s), tg(B * s);
      for (int m = 0; m < loader.micro_batches_per_step(); ++m) {
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
  GptDataset g(*ds_, 9, /*shuffle=*/false, 7);
  ASSERT_LT(g.num_samples_per_epoch(), 4 * 8);  // the steps below cross an epoch boundary
  check_loader(g, stream_, /*B=*/2, /*G=*/8, /*dp=*/1);
  check_loader(g, stream_, /*B=*/2, /*G=*/8, /*dp=*/2);
  check_loader(g, stream_, /*B=*/1, /*G=*/6, /*dp=*/2);
}

TEST_F(GptData, LoaderRejectsIndivisibleGlobalBatch) {
  GptDataset g(*ds_, 5, false, 7);
  EXPECT_THROW(BatchLoader(g, 2, 6, 0, 2), InputError);
  EXPECT_THROW(BatchLoader(g, 0, 8, 0, 1), InputError);
  EXPECT_NO_THROW(BatchLoader(g, 2, 8, 1, 2));
}

}  // namespace
}  // namespace megatrain
