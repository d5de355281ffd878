// Tests of the sample-index cache: a miss builds and saves, a hit loads the same samples, a
// damaged or truncated file is rebuilt with a warning, other settings use another file, only the
// writing rank writes, and an unwritable cache folder is only a warning.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/dataset_builder.h"
#include "data/sample_index_cache.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int k : {0, 1}) {
      const std::string prefix = (dir_ / ("ds" + std::to_string(k))).string();
      IndexedDatasetWriter w(prefix, TokenDtype::u16);
      for (int d = 0; d < 40; ++d) {
        std::vector<int32_t> doc(2 + (d * 7 + k) % 13, 10 * k + d % 10);
        doc.push_back(256);
        w.add_document(doc);
      }
      w.finalize();
      ds_.push_back(IndexedDataset::open(prefix));
    }
    parts_ = {{0.6, &ds_[0], DocRange{0, 36}}, {0.4, &ds_[1], DocRange{0, 36}}};
    options_ = SampleIndexOptions{6, true, 17, 500, (dir_ / "cache").string(), true, true};
  }

  std::unique_ptr<BlendedDataset> build(BuildReport& report, const SampleIndexOptions& o) {
    return build_blended_dataset(parts_, o, report);
  }
  std::unique_ptr<BlendedDataset> build(BuildReport& report) { return build(report, options_); }

  static std::vector<int32_t> all_samples(const BlendedDataset& b) {
    std::vector<int32_t> out(static_cast<size_t>(b.num_samples() * (b.seq_len() + 1)));
    for (int64_t i = 0; i < b.num_samples(); ++i) b.sample(i, out.data() + i * (b.seq_len() + 1));
    return out;
  }
  std::vector<int32_t> in_memory() {
    SampleIndexOptions o = options_;
    o.use_cache = false;
    BuildReport r;
    return all_samples(*build(r, o));
  }

  test::TempDir dir_{"cache"};
  std::vector<IndexedDataset> ds_;
  std::vector<BlendPart> parts_;
  SampleIndexOptions options_;
};

TEST_F(CacheTest, MissBuildsAndSavesThenHitLoadsTheSameSamples) {
  BuildReport first, second;
  const auto a = build(first);
  EXPECT_FALSE(first.loaded);
  EXPECT_TRUE(first.saved);
  EXPECT_TRUE(first.warnings.empty());
  EXPECT_TRUE(fs::exists(first.path)) << first.path;
  EXPECT_EQ(fs::path(first.path).parent_path(), dir_ / "cache");
  const auto b = build(second);
  EXPECT_TRUE(second.loaded);
  EXPECT_FALSE(second.saved);
  EXPECT_TRUE(second.warnings.empty());
  EXPECT_EQ(second.path, first.path);
  const auto expect = in_memory();
  EXPECT_EQ(all_samples(*a), expect);
  EXPECT_EQ(all_samples(*b), expect);
  for (const auto& e : fs::directory_iterator(dir_ / "cache"))
    EXPECT_EQ(e.path().string(), first.path) << "a temporary file was left behind";
}

TEST_F(CacheTest, DefaultFolderIsNextToTheFirstPrefix) {
  options_.cache_dir = "";
  BuildReport r;
  build(r);
  EXPECT_EQ(fs::path(r.path).parent_path(), fs::path(ds_[0].prefix() + ".megatrain-cache"));
  EXPECT_TRUE(fs::exists(r.path));
}

TEST_F(CacheTest, DamagedOrTruncatedFileIsRebuiltWithAWarning) {
  BuildReport r;
  build(r);
  const std::string path = r.path;
  const auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size * 2 / 3));
    f.put('\x5a');
  }
  const auto expect = in_memory();
  for (int round = 0; round < 2; ++round) {
    BuildReport damaged;
    const auto b = build(damaged);
    EXPECT_FALSE(damaged.loaded);
    EXPECT_TRUE(damaged.saved);
    ASSERT_EQ(damaged.warnings.size(), 1u);
    EXPECT_NE(damaged.warnings[0].find("rebuilding"), std::string::npos) << damaged.warnings[0];
    EXPECT_NE(damaged.warnings[0].find(path), std::string::npos) << damaged.warnings[0];
    EXPECT_EQ(all_samples(*b), expect);
    BuildReport again;
    build(again);
    EXPECT_TRUE(again.loaded) << "the rebuilt file is used next time";
    fs::resize_file(path, size / 2);  // round 2: truncated
  }
  fs::resize_file(path, 5);
  BuildReport tiny;
  build(tiny);
  EXPECT_FALSE(tiny.loaded);
  EXPECT_EQ(tiny.warnings.size(), 1u);
}

TEST_F(CacheTest, EverySettingThatChangesTheIndexChangesTheFile) {
  BuildReport base;
  build(base);
  std::vector<std::string> paths{base.path};
  auto path_with = [&](auto edit) {
    SampleIndexOptions o = options_;
    std::vector<BlendPart> saved = parts_;
    edit(o);
    const std::string key_path = sample_index_cache_path(o.cache_dir, sample_index_key(parts_, o));
    parts_ = saved;
    return key_path;
  };
  paths.push_back(path_with([](SampleIndexOptions& o) { o.seed = 18; }));
  paths.push_back(path_with([](SampleIndexOptions& o) { o.shuffle = false; }));
  paths.push_back(path_with([](SampleIndexOptions& o) { o.seq_len = 7; }));
  paths.push_back(path_with([](SampleIndexOptions& o) { o.num_samples = 501; }));
  paths.push_back(path_with([&](SampleIndexOptions&) { parts_[0].weight = 0.5; }));
  paths.push_back(path_with([&](SampleIndexOptions&) { parts_[1].docs = DocRange{36, 38}; }));
  paths.push_back(path_with([&](SampleIndexOptions&) { std::swap(parts_[0], parts_[1]); }));
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = i + 1; j < paths.size(); ++j) EXPECT_NE(paths[i], paths[j]) << i << " vs " << j;
  // Rewriting a dataset (new size and mtime) changes the key.
  const std::string before = sample_index_key(parts_, options_);
  {
    IndexedDatasetWriter w(ds_[1].prefix(), TokenDtype::u16);
    for (int d = 0; d < 41; ++d) w.add_document(std::vector<int32_t>(5, 7));
    w.finalize();
  }
  EXPECT_NE(sample_index_key(parts_, options_), before);
}

TEST_F(CacheTest, OnlyTheWritingRankWrites) {
  options_.write_cache = false;
  BuildReport r;
  const auto b = build(r);
  EXPECT_FALSE(r.loaded);
  EXPECT_FALSE(r.saved);
  EXPECT_FALSE(fs::exists(r.path));
  EXPECT_EQ(all_samples(*b), in_memory());
}

TEST_F(CacheTest, UnwritableFolderIsAWarningAndTheRunContinues) {
  std::ofstream(dir_ / "file") << "x";
  options_.cache_dir = (dir_ / "file" / "cache").string();  // a folder under a regular file
  BuildReport r;
  const auto b = build(r);
  EXPECT_FALSE(r.saved);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("not saved"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("data.cache_dir"), std::string::npos) << r.warnings[0];
  EXPECT_EQ(all_samples(*b), in_memory());
}

TEST_F(CacheTest, SingleDatasetStoresNoBlendIndex) {
  parts_.resize(1);
  BuildReport first, second;
  const auto a = build(first);
  EXPECT_TRUE(a->index().dataset.empty());
  const auto b = build(second);
  EXPECT_TRUE(second.loaded);
  EXPECT_EQ(all_samples(*a), all_samples(*b));
}

}  // namespace
}  // namespace megatrain
