// The root attributes of a checkpoint (step, consumed_samples, seed, config, parallel_layout, and
// from version 3 the loss scaler's) are covered by meta_crc32 (checkpoint/checkpoint_file.h,
// docs/checkpoint-format.md): its value is zlib's CRC-32 of the documented byte string, any change
// to one of them is refused naming the file, and version 1 (no checksum) and version 2 (no loss
// scaler) files still load.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <string>

#include "tests/expect_contains.h"
#include "tests/input_error.h"
#include "checkpoint/checkpoint_file.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;

class CheckpointMetaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("megatrain_ckmeta_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "model.h5").string();
    m_.n_layers = 1, m_.d_model = 16, m_.n_heads = 2, m_.vocab_size = 40, m_.max_seq_len = 8;
    layout_ = gpt_param_layout(m_);
    buf_ = std::vector<float>(static_cast<size_t>(3 * layout_.total()), 0.5f);
    checkpoint_file_write(path_, tensors(), meta_, Comm::world());
  }
  void TearDown() override { fs::remove_all(dir_); }

  CheckpointTensors tensors() {
    const int64_t n = layout_.total();
    return checkpoint_tensors_full(layout_, buf_.data(), buf_.data() + n, buf_.data() + 2 * n, 0, 1);
  }
  // Runs F on the file's root group opened for writing.
  template <class F>
  void edit_root(F&& f) {
    const hid_t file = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    f(file);
    H5Fclose(file);
  }
  static void set_i64(hid_t obj, const char* name, int64_t v) {
    const hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
  }

  fs::path dir_;
  std::string path_;
  ModelConfig m_;
  ParamLayout layout_;
  std::vector<float> buf_;
  const CheckpointMeta meta_{{7, 70, 1234, 2, 16384.0, 5, 1}, "[model]\nn_layers = 1\n", R"({"tp":1,"dp":1})"};
};

TEST_F(CheckpointMetaTest, StoredChecksumIsZlibsCrcOfTheDocumentedBytes) {
  const std::string bytes = "step=7\nconsumed_samples=70\nseed=1234\nconfig=[model]\nn_layers = 1\n\n"
                            "parallel_layout={\"tp\":1,\"dp\":1}\nskipped_steps=2\nloss_scale=16384\n"
                            "loss_scale_growth_tracker=5\nloss_scale_hysteresis_tracker=1\n";
  const auto want = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()),
                                                static_cast<uInt>(bytes.size())));
  uint32_t stored = 0;
  edit_root([&](hid_t f) {
    const hid_t a = H5Aopen(f, "meta_crc32", H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_UINT32, &stored);
    H5Aclose(a);
  });
  EXPECT_EQ(stored, want);
  EXPECT_EQ(checkpoint_meta_crc32(meta_), want);
  const CheckpointMeta got = checkpoint_file_read(path_, tensors());
  EXPECT_EQ(got.state.step, 7);
  EXPECT_EQ(got.state.skipped_steps, 2);
  EXPECT_EQ(got.state.loss_scale, 16384.0);
  EXPECT_EQ(got.state.loss_scale_growth_tracker, 5);
  EXPECT_EQ(got.state.loss_scale_hysteresis_tracker, 1);
  EXPECT_EQ(got.config_toml, meta_.config_toml);
}

TEST_F(CheckpointMetaTest, AChangedStepOrConsumedCountOrSeedIsRefused) {
  for (const char* name : {"step", "consumed_samples", "seed", "skipped_steps", "loss_scale_growth_tracker"}) {
    SetUp();
    edit_root([&](hid_t f) { set_i64(f, name, 8); });
    const std::string e = test::input_error_of([&] { checkpoint_file_read(path_, tensors()); });
    EXPECT_CONTAINS(e, path_);
    EXPECT_CONTAINS(e, "do not match meta_crc32");
    EXPECT_CONTAINS(test::input_error_of([&] { checkpoint_file_read_meta(path_); }), "meta_crc32");
  }
}

TEST_F(CheckpointMetaTest, AChangedConfigIsRefused) {
  edit_root([&](hid_t f) {
    H5Adelete(f, "config");
    const std::string text = "[model]\nn_layers = 2\n";
    const hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate(H5S_SCALAR);
    H5Tset_size(type, text.size());
    const hid_t a = H5Acreate2(f, "config", type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, text.data());
    H5Aclose(a), H5Sclose(space), H5Tclose(type);
  });
  EXPECT_CONTAINS(test::input_error_of([&] { checkpoint_file_read(path_, tensors()); }), "do not match meta_crc32");
}

TEST_F(CheckpointMetaTest, VersionOneFilesWithoutTheChecksumStillLoad) {
  edit_root([&](hid_t f) {
    H5Adelete(f, "meta_crc32");
    set_i64(f, "format_version", 1);
  });
  EXPECT_EQ(checkpoint_file_read(path_, tensors()).state.consumed_samples, 70);
  edit_root([&](hid_t f) { set_i64(f, "format_version", 2); });  // version 2 must have it
  EXPECT_CONTAINS(test::input_error_of([&] { checkpoint_file_read(path_, tensors()); }), "meta_crc32");
}

TEST_F(CheckpointMetaTest, VersionTwoFilesWithoutTheLossScalerStillLoad) {
  CheckpointMeta v2 = meta_;
  v2.state.skipped_steps = 0, v2.state.loss_scale = 0.0;
  v2.state.loss_scale_growth_tracker = v2.state.loss_scale_hysteresis_tracker = 0;
  edit_root([&](hid_t f) {
    for (const char* name : {"skipped_steps", "loss_scale", "loss_scale_growth_tracker", "loss_scale_hysteresis_tracker"})
      H5Adelete(f, name);
    set_i64(f, "format_version", 2);
    const uint32_t crc = checkpoint_meta_crc32(v2, 2);
    const hid_t a = H5Aopen(f, "meta_crc32", H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_UINT32, &crc);
    H5Aclose(a);
  });
  const CheckpointMeta got = checkpoint_file_read(path_, tensors());
  EXPECT_EQ(got.state.step, 7);
  EXPECT_EQ(got.state.loss_scale, 0.0);
  EXPECT_EQ(got.state.skipped_steps, 0);
}

}  // namespace
}  // namespace megatrain
