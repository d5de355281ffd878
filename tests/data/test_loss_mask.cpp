// The loss-mask companion PREFIX.lossmask (data/loss_mask.h): its bytes checked by a reader
// written here from the README's layout (header fields, FNV-1a 64 of the .idx's lengths computed
// here, bits LSB first); every companion that does not belong to its dataset refused naming the
// file; a prefix rewritten without a mask losing its old companion; and the mask carried, aligned
// token for token, through GptDataset (document boundaries, shuffling, splits), the blend (a
// dataset without a companion learns everything), the sample-index cache and the loader (an
// unlearned token's target is kUnlearnedTarget). Alignment is checked with a mask that is a function of the token itself.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/dataset_builder.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data/loss_mask.h"
#include "kernels/check.h"
#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

uint64_t u64_at(const std::string& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
  return v;
}

// Token t of the test streams is learned iff it is odd: any misalignment between tokens and bits shows.
bool learned(int32_t token) { return token % 2 == 1; }

class LossMaskFiles : public ::testing::Test {
 public:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Documents of the given lengths with tokens 0, 1, 2, … (mod 50) across them; the mask from learned().
  std::string write(const std::string& name, const std::vector<int>& lengths, bool mask = true) const {
    IndexedDatasetWriter w(path(name), TokenDtype::u16, mask);
    int32_t next = 0;
    for (int n : lengths) {
      std::vector<int32_t> doc;
      std::vector<uint8_t> bits;
      for (int i = 0; i < n; ++i, next = (next + 1) % 50) doc.push_back(next), bits.push_back(learned(next) ? 1 : 0);
      if (mask)
        w.add_document(doc, bits);
      else
        w.add_document(doc);
    }
    w.finalize();
    return path(name);
  }
  test::TempDir dir_{"lossmask"};
};

TEST_F(LossMaskFiles, TheBytesAreTheDocumentedLayout) {
  const std::string prefix = write("ds", {3, 7, 4});  // 14 tokens: 2 bytes of bits
  const std::string b = bytes_of(prefix + ".lossmask");
  ASSERT_EQ(b.size(), 32u + 2u);
  EXPECT_EQ(b.substr(0, 8), std::string("MTLMASK\0", 8));
  EXPECT_EQ(u64_at(b, 8), 1u);    // version
  EXPECT_EQ(u64_at(b, 16), 14u);  // tokens
  // FNV-1a 64 over the .idx's int32 lengths, stored after its 34-byte header.
  const std::string idx = bytes_of(prefix + ".idx");
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 34; i < 34 + 3 * 4; ++i) h = (h ^ static_cast<unsigned char>(idx[i])) * 0x100000001b3ull;
  EXPECT_EQ(u64_at(b, 24), h);
  // Tokens 0..13: odd ones learned, LSB first: 0b10101010, then tokens 8..13 → 0b00101010.
  EXPECT_EQ(static_cast<unsigned char>(b[32]), 0xAAu);
  EXPECT_EQ(static_cast<unsigned char>(b[33]), 0x2Au);

  const IndexedDataset ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.has_loss_mask());
  std::vector<uint8_t> got(5);
  ds.read_loss_mask(6, 5, got.data());
  EXPECT_EQ(got, (std::vector<uint8_t>{0, 1, 0, 1, 0}));
}

TEST_F(LossMaskFiles, ADatasetWithoutACompanionLearnsEveryToken) {
  const IndexedDataset ds = IndexedDataset::open(write("plain", {5, 5}, false));
  EXPECT_FALSE(ds.has_loss_mask());
  std::vector<uint8_t> got(4, 7);
  ds.read_loss_mask(3, 4, got.data());
  EXPECT_EQ(got, std::vector<uint8_t>(4, 1));
}

TEST_F(LossMaskFiles, ACompanionOfAnotherDatasetIsRefusedNamingIt) {
  const std::string a = write("a", {4, 6}), other_cut = write("b", {5, 5}), longer = write("c", {4, 7});
  const std::string mask = a + ".lossmask";
  const auto swap_in = [&](const std::string& from) {
    fs::copy_file(from + ".lossmask", mask, fs::copy_options::overwrite_existing);
  };
  swap_in(other_cut);  // same 10 tokens, other documents
  std::string msg = test::input_error_of([&] { IndexedDataset::open(a); });
  EXPECT_CONTAINS(msg, mask);
  EXPECT_CONTAINS(msg, "other documents");
  swap_in(longer);
  EXPECT_CONTAINS(test::input_error_of([&] { IndexedDataset::open(a); }), "written for 11 tokens");
  std::string b = bytes_of(longer + ".lossmask");
  std::ofstream(mask, std::ios::binary) << b.substr(0, 20);
  EXPECT_CONTAINS(test::input_error_of([&] { IndexedDataset::open(a); }), "truncated header");
  write("a", {4, 6});
  b = bytes_of(mask);
  std::ofstream(mask, std::ios::binary) << b << "x";
  EXPECT_CONTAINS(test::input_error_of([&] { IndexedDataset::open(a); }), "(damaged)");
}

TEST_F(LossMaskFiles, RewritingAPrefixWithoutAMaskRemovesTheOldOne) {
  const std::string prefix = write("ds", {4, 4});
  ASSERT_TRUE(fs::exists(prefix + ".lossmask"));
  write("ds", {4, 4}, false);
  EXPECT_FALSE(fs::exists(prefix + ".lossmask"));
  EXPECT_FALSE(IndexedDataset::open(prefix).has_loss_mask());
}

// Every sample's mask bits are those of its own tokens, whatever the order: ordered and shuffled,
// across document boundaries, in a split's range and in a blend with a dataset without a mask.
TEST_F(LossMaskFiles, SamplesCarryTheirTokensBitsThroughShuffleSplitsAndBlends) {
  const IndexedDataset masked = IndexedDataset::open(write("m", {3, 9, 1, 14, 6, 11, 5, 8}));
  const IndexedDataset plain = IndexedDataset::open(write("p", {20, 20, 20}, false));
  const int S = 5;
  for (bool shuffle : {false, true}) {
    const std::vector<BlendPart> parts = {{0.6, &masked, DocRange{1, 8}}, {0.4, &plain, DocRange{0, 3}}};
    // Built and saved to the sample-index cache, then loaded from it: the same tokens and bits.
    const SampleIndexOptions cached{S, shuffle, 7, 40, path(shuffle ? "cache1" : "cache0"), true, true};
    BuildReport built, report;
    const auto first = build_blended_dataset(parts, cached, built);
    const auto blend = build_blended_dataset(parts, cached, report);
    ASSERT_TRUE(built.saved && report.loaded);
    ASSERT_TRUE(blend->has_loss_mask());
    std::vector<int32_t> tokens(S + 1);
    std::vector<uint8_t> bits(S + 1);
    int from_masked = 0;
    for (int64_t i = 0; i < 40; ++i) {
      std::vector<int32_t> first_tokens(S + 1);
      std::vector<uint8_t> first_bits(S + 1);
      first->read_sample(i, first_tokens.data(), first_bits.data());
      blend->read_sample(i, tokens.data(), bits.data());
      ASSERT_EQ(tokens, first_tokens);
      ASSERT_EQ(bits, first_bits);
      const bool masked_source = blend->source(i).dataset == 0;
      from_masked += masked_source;
      for (int t = 0; t <= S; ++t)
        ASSERT_EQ(bits[static_cast<size_t>(t)], masked_source ? learned(tokens[static_cast<size_t>(t)]) : 1)
            << "sample " << i << " token " << t << " shuffle " << shuffle;
    }
    EXPECT_GT(from_masked, 10);

    // The loader: target t is the token unless that token is not learned.
    BatchLoader loader(*blend, 2, 4, 0, 1);
    ASSERT_TRUE(loader.has_loss_mask());
    std::vector<int32_t> inputs(2 * S), targets(2 * S);
    for (int64_t step = 0; step < 10; ++step) {
      loader.load(step, 0, inputs.data(), targets.data());
      for (int b = 0; b < 2; ++b) {
        const int64_t i = loader.sample_index(step, 0, b);
        blend->read_sample(i, tokens.data(), bits.data());
        for (int t = 0; t < S; ++t)
          ASSERT_EQ(targets[static_cast<size_t>(b * S + t)],
                    bits[static_cast<size_t>(t + 1)] ? tokens[static_cast<size_t>(t + 1)] : kUnlearnedTarget);
      }
    }
  }
  BuildReport report;
  const std::vector<BlendPart> only_plain = {{1.0, &plain, DocRange{0, 3}}};
  EXPECT_FALSE(build_blended_dataset(only_plain, {S, false, 7, 10, "", false, false}, report)->has_loss_mask());
}

}  // namespace
}  // namespace megatrain
