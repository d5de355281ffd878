// Damaged or mismatched checkpoint files are refused with the file, the tensor and the reason:
// a tensor the model needs is missing, a shape differs, the format version is unknown.
// (Truncation, checksums, fallback and resume are covered end to end in tests/e2e.)
#include <gtest/gtest.h>
#include <hdf5.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "trainer/checkpoint_file.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;

ModelConfig tiny() {
  ModelConfig m;
  m.n_layers = 1;
  m.d_model = 16;
  m.n_heads = 2;
  m.vocab_size = 40;
  m.max_seq_len = 8;
  return m;
}

struct Saved {
  ParamLayout layout;
  FlatBuffer p, m, v;
  explicit Saved(const ModelConfig& cfg)
      : layout(gpt_param_layout(cfg)), p(layout.total()), m(layout.total()), v(layout.total()) {
    init_params(layout, p.data(), cfg, 3);
  }
  CheckpointTensors tensors() { return {&layout, p.data(), m.data(), v.data()}; }
};

class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("megatrain_ckfile_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "model.h5").string();
    Saved s(tiny());
    checkpoint_file_write(path_, s.tensors(), CheckpointMeta{{7, 70, 1}, "[model]\n", "{}"}, Comm::world(), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read_error(const ModelConfig& cfg) {
    Saved s(cfg);
    try {
      checkpoint_file_read(path_, s.tensors());
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(CheckpointFile, RoundTripsEveryTensorAndTheState) {
  Saved want(tiny()), got(tiny());
  got.p = FlatBuffer(got.layout.total());
  const CheckpointMeta meta = checkpoint_file_read(path_, got.tensors());
  EXPECT_EQ(meta.state.step, 7);
  EXPECT_EQ(meta.state.consumed_samples, 70);
  EXPECT_EQ(0, std::memcmp(want.p.data(), got.p.data(), sizeof(float) * static_cast<size_t>(want.layout.total())));
}

TEST_F(CheckpointFile, MissingTensorIsNamed) {
  ModelConfig untied = tiny();
  untied.tie_embeddings = false;  // needs lm_head.weight, which the file does not have
  const std::string e = read_error(untied);
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("params/lm_head.weight is missing"), std::string::npos) << e;
}

TEST_F(CheckpointFile, WrongShapeIsNamed) {
  ModelConfig longer = tiny();
  longer.max_seq_len = 16;  // embed.wpe becomes (16, 16)
  const std::string e = read_error(longer);
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("params/embed.wpe has shape (8, 16), the model expects (16, 16)"), std::string::npos) << e;
}

TEST_F(CheckpointFile, UnknownFormatVersionIsRefused) {
  {
    const hid_t f = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    const int64_t v = 99;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(a);
    H5Fclose(f);
  }
  const std::string e = read_error(tiny());
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("format version 99 is not supported"), std::string::npos) << e;
}

}  // namespace
}  // namespace megatrain
